#!/usr/bin/env bash
# Every core budget of issue 19 in one run, as a ratio to the same reference measured in
# the same process: serde_json's parse of the same 150-byte alert into a borrowed struct
# (no semantics). The machine's speed drifts from day to day; the ratios hold better.
#  - benches/core.rs: the reference, our parses, decide, the engine call, the C ABI overhead;
#  - benches/alloc.rs: allocations per delivery (a counting allocator) and one strategy's
#    window memory;
#  - Python (json + hashlib + the same decision), the usual Flask-handler approach, when
#    python3 is there.
# MEASURE=SECONDS sets criterion's measurement time per line (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
crit=$(mktemp -d)
trap 'rm -rf "$crit"' EXIT
CRITERION_HOME="$crit" cargo bench --bench core -- --warm-up-time 1 --measurement-time "${MEASURE:-3}" >/dev/null 2>&1 \
  || { echo "cargo bench --bench core failed" >&2; exit 1; }
mem=$(cargo bench --bench alloc 2>/dev/null)
median() { # criterion's median estimate, in ns
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"])' \
    "$crit/core/$1/new/estimates.json"
}
# The reference is measured first and last; load only slows a figure, so the lower of
# the two is the closer one (and makes every ratio err against the core).
floor=$(python3 -c "print(min($(median floor), $(median floor_again)))")
line() { # name, id, budget ratio ("" for none)
  local ns r
  ns=$(median "$2")
  r=$(python3 -c "print(f'{$ns / $floor:.2f}')")
  local verdict=""
  if [ -n "$3" ]; then
    verdict=$(python3 -c "print('met' if $r <= $3 else 'NOT met')")
    verdict="(budget ≤ $3×: $verdict)"
  fi
  printf '%-52s %9.0f ns %7s×  %s\n' "$1" "$ns" "$r" "$verdict"
}
printf '%-52s %12s %8s\n' "stage (ratio to the borrowed-struct parse, same run)" "median" "ratio"
printf '%-52s %9.0f ns %7s×\n' "reference: serde_json borrowed struct, 150 B" "$floor" "1.00"
line "parse: JSON alert, 150 B" parse_json 1.5
for t in free_words_short free_words_full tradingview_fill key_value_3 key_value_7 key_value_10 json_looking; do
  line "parse: text $t" "text_$t" 3
done
line "decide alone (rate, parse, dedup, rules, 2 bots)" decide 2
line "engine call, 2 serialized broker requests" engine 4
for s in 404 200; do
  ns=$(median "ffi_overhead_$s")
  r=$(python3 -c "print(f'{$ns / $floor:.2f}')")
  v=$(python3 -c "print('met' if $ns < 50 else 'NOT met')")
  printf '%-52s %9.0f ns %7s×  (budget < 50 ns: %s)\n' "C ABI overhead per delivery ($s)" "$ns" "$r" "$v"
done
allocs=$(echo "$mem" | sed -n 's/allocs_per_delivery=//p')
heap=$(echo "$mem" | sed -n 's/strategy_heap_bytes=//p')
printf '%-52s %12s           (budget ≤ 5: %s)\n' "allocations per delivery (engine call)" "$allocs" \
  "$(python3 -c "print('met' if $allocs <= 5 else 'NOT met')")"
printf '%-52s %9s B            (budget < 32 KiB: %s)\n' "one strategy's windows, full" "$heap" \
  "$(python3 -c "print('met' if $heap < 32768 else 'NOT met')")"
if command -v python3 >/dev/null && [ -f examples/strategies/demo.json ]; then
  py=$(python3 benches/compare_python.py examples/strategies/demo.json | sed -n 's/python_ns=//p')
  printf '%-52s %9.0f ns           (decide is %.1f× faster; a later process than the ratios)\n' \
    "Python json+hashlib+decision (Flask-handler core)" "$py" "$(python3 -c "print($py / $(median decide))")"
fi
