#!/usr/bin/env bash
# Runs the fuzz targets. Usage: bash scripts/fuzz.sh [SECONDS | runs=N] [TARGET...]
#   SECONDS   time per target, default 60; the README records the long runs (1800 s each)
#   runs=N    a fixed number of runs per target instead (what CI does)
# Seeds each target's corpus from the test corpora first. Needs cargo-fuzz (installed
# here when missing) and uses RUSTC_BOOTSTRAP=1 because this machine has only the
# stable toolchain, whose compiler accepts the sanitizer flags that way.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-60}
shift || true
case "$limit" in
  # A fixed count is CI's run: a fixed seed too, so that it is the same run on every machine (exploring is what
  # the timed runs are for).
  runs=*) budget=(-runs="${limit#runs=}" -seed=1) ;;
  *) budget=(-max_total_time="$limit") ;;
esac
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(parse_json parse_text engine snapshot ffi)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --version 0.13.2 --locked
python3 scripts/fuzz-seeds.py
export RUSTC_BOOTSTRAP=1
for t in "${targets[@]}"; do
  # Inputs that once failed are replayed first, every run.
  mkdir -p "fuzz/regressions/$t"
  echo "==> fuzzing $t ($limit)"
  (cd fuzz && cargo fuzz run -O "$t" "corpus/$t" "regressions/$t" -- "${budget[@]}" -dict=dict/alert.dict \
      -max_len=262144 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
done
