#!/usr/bin/env bash
# Regenerates the C header from src/ffi.rs into a temporary file and fails when the
# checked-in include/strategy_webhook.h differs. With --write, updates it instead.
#
# Needs the pinned cbindgen: cargo install cbindgen --version 0.29.4 --locked
set -euo pipefail

CBINDGEN_VERSION=0.29.4
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
header=include/strategy_webhook.h

if ! command -v cbindgen >/dev/null 2>&1; then
    echo "check-header: cbindgen not found; install it with" >&2
    echo "  cargo install cbindgen --version $CBINDGEN_VERSION --locked" >&2
    exit 2
fi
have="$(cbindgen --version | awk '{print $2}')"
if [ "$have" != "$CBINDGEN_VERSION" ]; then
    echo "check-header: cbindgen $have found, $CBINDGEN_VERSION required (the header depends on it); run" >&2
    echo "  cargo install cbindgen --version $CBINDGEN_VERSION --locked --force" >&2
    exit 2
fi

tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
cbindgen --quiet --config cbindgen.toml --output "$tmp" src/ffi.rs

if [ "${1:-}" = "--write" ]; then
    cp "$tmp" "$header"
    echo "check-header: wrote $header"
    exit 0
fi

if ! diff -u "$header" "$tmp"; then
    echo "check-header: $header is stale; regenerate it with scripts/check-header.sh --write and commit it" >&2
    exit 1
fi
echo "check-header: $header is up to date"
