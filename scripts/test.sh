#!/usr/bin/env bash
# Runs every test of the project: `bash scripts/test.sh`. Installs what the tests need
# when it is missing (scripts/setup.sh), so it works on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# Disk: CI machines vary, and one run stopped with "No space left on device" while linking the server's tests.
# Full debug info and incremental caches make most of a debug target directory's size and nothing here reads them:
# line tables keep panics' and valgrind's file:line, and a clean clone gains nothing from incremental state.
# `SWH_FULL_DEBUG=1` keeps cargo's defaults for a developer who wants to step through a test in gdb.
if [ "${SWH_FULL_DEBUG:-0}" != 1 ]; then
    export CARGO_INCREMENTAL=0
    export CARGO_PROFILE_DEV_DEBUG=line-tables-only
    export CARGO_PROFILE_TEST_DEBUG=line-tables-only
fi
# What the run has to work with, so a failure for space says so at the top of the log.
free_disk() { df -Pk . | awk 'NR==2 {printf "%.1f GiB free on %s\n", $4/1048576, $6}'; }
free_disk

step "setup (installs missing tools)"
bash scripts/setup.sh

free_disk

step "formatting (cargo fmt --check)"
cargo fmt --all -- --check

step "lints (cargo clippy --workspace --all-targets -- -D warnings)"
cargo clippy --workspace --all-targets -- -D warnings

step "the core compiles none of the server's stack (cargo tree -p strategy-webhook -e normal,dev)"
# The server (examples/server, package strategy-webhook-server) owns tokio, hyper, rustls and SQLite; the core
# and its own tests and benches must not pull any of them in.
server_stack=$(cargo tree -p strategy-webhook -e normal,dev --prefix none | grep -E '^(tokio|hyper|hyper-util|rusqlite|rustls|tokio-rustls) ' || true)
if [ -n "$server_stack" ]; then
    echo "the core depends on the server's stack:"
    echo "$server_stack" | sort -u
    exit 1
fi
echo "ok: no tokio, hyper, rustls or rusqlite under strategy-webhook"

step "C header is current (cbindgen 0.29.4)"
bash scripts/check-header.sh

step "Rust tests (cargo test --workspace: the core and the server)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee "$log"
cargo test --workspace --doc 2>&1 | tee -a "$log"

free_disk

step "C ABI: C host, C tests and C++ header check, under valgrind"
bash scripts/c-tests.sh

step "Logs view and operator console in headless Chromium"
bash scripts/ui-test.sh
bash scripts/console-test.sh

free_disk

step "fuzz targets: a fixed number of runs each"
bash scripts/fuzz.sh runs=3000

# One closing line for the whole run: the Rust tests' counts (the C tests print their own above).
awk '/^test result:/ {p += $4; f += $6} END {printf "tests: %d passed, %d failed\n", p, f}' "$log"
