#!/usr/bin/env bash
# Runs every test of the project: `bash scripts/test.sh`. Installs what the tests need
# when it is missing (scripts/setup.sh), so it works on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "setup (installs missing tools)"
bash scripts/setup.sh

step "formatting (cargo fmt --check)"
cargo fmt --all -- --check

step "lints (cargo clippy --all-targets -- -D warnings)"
cargo clippy --all-targets -- -D warnings

step "C header is current (cbindgen 0.29.4)"
bash scripts/check-header.sh

step "Rust tests (cargo test)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --all-targets --no-fail-fast 2>&1 | tee "$log"
cargo test --doc 2>&1 | tee -a "$log"

step "C ABI: C host, C tests and C++ header check, under valgrind"
bash scripts/c-tests.sh

step "Logs view in headless Chromium"
bash scripts/ui-test.sh

step "fuzz targets: a fixed number of runs each"
bash scripts/fuzz.sh runs=3000

# One closing line for the whole run: the Rust tests' counts (the C tests print their own above).
awk '/^test result:/ {p += $4; f += $6} END {printf "tests: %d passed, %d failed\n", p, f}' "$log"
