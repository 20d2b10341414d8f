#!/usr/bin/env bash
# The Logs view in a real browser: starts the server on ephemeral loopback ports with a test strategy, stores a
# processed, a rejected and a failed (500) alert, then has headless Chromium render the page to a screenshot and
# to its DOM, and checks the three rows and their levels are there.
#
#   scripts/ui-test.sh            # screenshot and DOM under $CARGO_TARGET_DIR (or target/)/ui-test/
#
# Needs: cargo, curl, python3; installs Debian's chromium when it is missing (as root).
set -euo pipefail

cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
out="$target/ui-test"
rm -rf "$out"
mkdir -p "$out/strategies" "$out/data"

if ! command -v chromium >/dev/null 2>&1; then
    echo "installing chromium…"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

cargo build --quiet -p strategy-webhook-server
server="$target/debug/strategy-webhook-server"

token=$(printf 'c%.0s' $(seq 64))
# A strategy with no bots answers `processed` with no orders whatever the broker formatters can do.
write_strategy() { # $1 = bots JSON
    python3 - "$out/strategies/ui.json" "$token" "$1" <<'EOF'
import json, sys
path, token, bots = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
snap = json.load(open("examples/strategies/demo.json"))
snap.update(id="ui-demo", name="UI test strategy", token_hash=token, bots=bots, allowed_instruments=["AAPL", "MSFT", "NVDA"])
tmp = path + ".tmp"
json.dump(snap, open(tmp, "w"), indent=2)
__import__("os").replace(tmp, path)
EOF
}
write_strategy '[]'

"$server" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --strategies "$out/strategies" --data-dir "$out/data" \
    --port-file "$out/ports.json" --reload-interval-ms 100 >"$out/server.out" 2>"$out/server.err" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 200); do [ -s "$out/ports.json" ] && break; sleep 0.05; done
[ -s "$out/ports.json" ] || { cat "$out/server.err"; echo "the server did not start"; exit 1; }
webhook=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["webhook"].split(":")[-1])' "$out/ports.json")
admin=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["admin"])' "$out/ports.json")
admin_token=$(cat "$out/data/admin-token")
url="https://localhost:$webhook/webhooks/$token"

post() { curl -sS --cacert "$out/data/cert.pem" -H 'Content-Type: application/json' -d "$1" -o /dev/null -w '%{http_code}' "$url"; }
[ "$(post '{"ticker":"AAPL","action":"buy"}')" = 200 ] || { echo "processed alert failed"; exit 1; }
[ "$(post '{"ticker":"TSLA","action":"buy"}')" = 200 ] || { echo "rejected alert failed"; exit 1; }
# Now give the strategy a bot that cannot size an order for NVDA (no price to divide the notional by): a 500.
# The file is reloaded live, keeping the strategy's state.
write_strategy '[{"id":"alpaca-x","broker":"alpaca","account_id":"PA1","sizing":{"fixed_notional":"1000"}}]'
for _ in $(seq 100); do
    bots=$(curl -sS -H "Authorization: Bearer $admin_token" "http://$admin/api/strategies" |
        python3 -c 'import json,sys; print(next(s["bots"] for s in json.load(sys.stdin)["strategies"] if s["id"]=="ui-demo"))')
    [ "$bots" = 1 ] && break
    sleep 0.1
done
[ "$(post '{"ticker":"NVDA","action":"buy"}')" = 500 ] || { echo "failed alert did not answer 500"; exit 1; }
for _ in $(seq 100); do
    n=$(curl -sS -H "Authorization: Bearer $admin_token" "http://$admin/api/strategies/ui-demo/logs?level=ERROR" |
        python3 -c 'import json,sys; print(len(json.load(sys.stdin)["logs"]))')
    [ "$n" -ge 1 ] && break
    sleep 0.1
done

page="http://$admin/logs/ui-demo?token=$admin_token"
chrome=(chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
    --disable-component-update --disable-sync --window-size=1200,800)
"${chrome[@]}" --user-data-dir="$(mktemp -d)" --screenshot="$out/logs.png" "$page" >"$out/chromium.log" 2>&1
"${chrome[@]}" --user-data-dir="$(mktemp -d)" --virtual-time-budget=3000 --dump-dom "$page" >"$out/logs.html" 2>>"$out/chromium.log"

fail=0
size=$(stat -c %s "$out/logs.png" 2>/dev/null || echo 0)
if [ "$size" -lt 10000 ]; then echo "FAIL: screenshot missing or trivial ($size bytes)"; fail=1; fi
for level in INFO WARN ERROR; do
    grep -q "class=\"row lvl-$level\"" "$out/logs.html" || { echo "FAIL: no $level row in the page"; fail=1; }
done
grep -q 'AAPL' "$out/logs.html" || { echo "FAIL: the processed alert's row is missing"; fail=1; }
grep -q 'TSLA' "$out/logs.html" || { echo "FAIL: the rejected alert's row is missing"; fail=1; }
grep -q 'NVDA' "$out/logs.html" || { echo "FAIL: the failed alert's row is missing"; fail=1; }
if grep -q "$token" "$out/logs.html"; then echo "FAIL: the webhook token is on the page"; fail=1; fi
# From and To are UTC, as the rows are, whatever the viewer's time zone: read as local time they moved the window
# by the offset (five hours here) and hid the rows asked for. The filters can come in the URL.
utc() { python3 -c 'import datetime,sys; print((datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=int(sys.argv[1]))).strftime("%Y-%m-%dT%H:%M"))' "$1"; }
TZ=America/New_York "${chrome[@]}" --user-data-dir="$(mktemp -d)" --virtual-time-budget=3000 --dump-dom \
    "$page&since=$(utc -2)" >"$out/logs-since-past.html" 2>>"$out/chromium.log"
TZ=America/New_York "${chrome[@]}" --user-data-dir="$(mktemp -d)" --virtual-time-budget=3000 --dump-dom \
    "$page&since=$(utc 2)" >"$out/logs-since-future.html" 2>>"$out/chromium.log"
grep -q 'class="row lvl-INFO"' "$out/logs-since-past.html" ||
    { echo "FAIL: From two hours ago (UTC) hid the rows in another time zone"; fail=1; }
if grep -q 'class="row lvl-' "$out/logs-since-future.html"; then
    echo "FAIL: From two hours ahead (UTC) still showed rows"; fail=1
fi
if [ "$fail" = 0 ]; then
    echo "ui-test: ok (screenshot $out/logs.png, $size bytes; DOM $out/logs.html)"
    echo "1 passed, 0 failed"
else
    echo "0 passed, 1 failed"
    exit 1
fi
