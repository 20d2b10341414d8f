#!/usr/bin/env bash
# Runs the fuzz targets. Usage: bash scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default 60; the README records the long runs (1800 s each).
# Seeds each target's corpus from the test corpora first. Needs cargo-fuzz (installed
# here when missing) and uses RUSTC_BOOTSTRAP=1 because this machine has only the
# stable toolchain, whose compiler accepts the sanitizer flags that way.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(parse_json parse_text engine snapshot ffi)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --version 0.13.2 --locked
python3 scripts/fuzz-seeds.py
export RUSTC_BOOTSTRAP=1
for t in "${targets[@]}"; do
  echo "==> fuzzing $t for ${secs}s"
  (cd fuzz && cargo fuzz run -O "$t" "corpus/$t" -- -max_total_time="$secs" -dict=dict/alert.dict \
      -max_len=262144 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
done
