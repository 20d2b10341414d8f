#!/usr/bin/env bash
# Compares the core against what a user would pick instead, in the same run:
#  - Python (json + hashlib + the same decision), the usual Flask-handler approach;
#  - serde_json::Value-based parsing (in benches/parse_json.rs).
# Prints each median and the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(python3 benches/compare_python.py examples/strategies/demo.json | sed -n 's/python_ns=//p')
out=$(cargo bench --bench decide --bench parse_json -- --warm-up-time 1 --measurement-time 5 2>/dev/null)
median() { # criterion prints [low median high]; take the middle value in ns
  echo "$out" | grep -A1 "$1" | grep -o 'time: *\[[^]]*\]' | awk '{v=$4; u=$5; if (u=="µs") v*=1000; if (u=="ms") v*=1e6; print v}'
}
decide=$(median "decide: rate")
ours=$(median "strategy_webhook::alert::parse")
value=$(median "serde_json::Value baseline")
printf '%-58s %10s\n' "stage (150-byte JSON alert)" "median"
printf '%-58s %8.0f ns\n' "Python json+hashlib+decision (Flask-handler core)" "$py"
printf '%-58s %8.0f ns   (%.1fx faster than Python)\n' "strategy-webhook parse+dedup+admit+decide" "$decide" "$(python3 -c "print($py / $decide)")"
printf '%-58s %8.0f ns\n' "serde_json::Value-based parse" "$value"
printf '%-58s %8.0f ns   (%.2fx the Value approach)\n' "strategy-webhook parse (exact decimals, synonyms, checks)" "$ours" "$(python3 -c "print($ours / $value)")"
