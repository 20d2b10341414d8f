#!/usr/bin/env bash
# The operator console in a real browser: starts the server on ephemeral loopback ports with two strategies
# (one with a paper bot and a bot whose broker, a local stub, refuses every order), sends a processed, a
# rejected and a failed alert, then has headless Chromium load each page (Strategies, a strategy, Send a sample
# message, Logs), checks its content in the rendered DOM, and takes screenshots at 1400×900 and at a phone's
# 390 px width.
#
#   scripts/console-test.sh       # screenshots and DOMs under $CARGO_TARGET_DIR (or target/)/ui-test/console/
#
# Needs: cargo, curl, python3, chromium (scripts/ui-test.sh installs it when missing).
set -euo pipefail

cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
out="$target/ui-test/console"
rm -rf "$out"
mkdir -p "$out/strategies" "$out/data"

cargo build --quiet -p strategy-webhook-server
server="$target/debug/strategy-webhook-server"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# A broker stub that refuses every order with a 400, on an ephemeral port.
python3 - "$out/broker.port" >"$out/broker.log" 2>&1 <<'EOF2' &
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps({"message": "insufficient buying power"}).encode()
        self.send_response(400); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    do_PUT = do_DELETE = do_POST
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1] + ".tmp", "w").write(str(s.server_port)); __import__("os").replace(sys.argv[1] + ".tmp", sys.argv[1])
s.serve_forever()
EOF2
pids+=($!)
for _ in $(seq 100); do [ -s "$out/broker.port" ] && break; sleep 0.05; done
broker_port=$(cat "$out/broker.port")
printf '{"schwab-live": {"delivery": "http", "base_url": "http://127.0.0.1:%s", "headers": {"Authorization": {"value": "Bearer test"}}}}\n' \
    "$broker_port" >"$out/bots.json"

token_a=$(printf 'a%.0s' $(seq 64))
token_b=$(printf 'b%.0s' $(seq 64))
python3 - "$out/strategies" "$token_a" "$token_b" <<'EOF2'
import json, sys
d, ta, tb = sys.argv[1:]
snap = json.load(open("examples/strategies/demo.json"))
a = dict(snap, id="console-demo", name="Console demo", token_hash=ta, allowed_instruments=["AAPL", "MSFT", "SPY"],
         bots=[{"id": "alpaca-paper", "broker": "alpaca", "account_id": "PA0000000", "sizing": {"fixed_quantity": "10"}},
               {"id": "schwab-live", "broker": "schwab", "account_id": "HASH0123", "sizing": {"fixed_quantity": "5"}}])
b = dict(snap, id="paused-one", name="Paused strategy", token_hash=tb, status="paused", bots=[])
json.dump(a, open(d + "/a.json", "w"), indent=1); json.dump(b, open(d + "/b.json", "w"), indent=1)
EOF2

"$server" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --strategies "$out/strategies" --data-dir "$out/data" \
    --bots "$out/bots.json" --port-file "$out/ports.json" >"$out/server.out" 2>"$out/server.err" &
pids+=($!)
for _ in $(seq 200); do [ -s "$out/ports.json" ] && break; sleep 0.05; done
[ -s "$out/ports.json" ] || { cat "$out/server.err"; echo "the server did not start"; exit 1; }
webhook=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["webhook"].split(":")[-1])' "$out/ports.json")
admin=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["admin"])' "$out/ports.json")
admin_token=$(cat "$out/data/admin-token")

post() { curl -sS --cacert "$out/data/cert.pem" -H 'Content-Type: application/json' -d "$2" -o /dev/null -w '%{http_code}' \
    "https://localhost:$webhook/webhooks/$1"; }
# The rejected alert first: an alert after the processed one would refuse its failed row's retry for that reason
# (a later alert came), where the page is to show the broker's own reason.
[ "$(post "$token_a" '{"ticker":"TSLA","action":"buy"}')" = 200 ] || { echo "rejected alert failed"; exit 1; }
[ "$(post "$token_a" '{"ticker":"AAPL","action":"buy"}')" = 200 ] || { echo "processed alert failed"; exit 1; }
api() { curl -sS -H "Authorization: Bearer $admin_token" "http://$admin$1"; }
# Both bots' rows finished: the paper one done, the refused one failed.
for _ in $(seq 100); do
    st=$(api /api/strategies/console-demo/outbox | python3 -c 'import json,sys; print(" ".join(sorted(r["status"] for r in json.load(sys.stdin)["outbox"])))')
    [ "$st" = "done failed" ] && break
    sleep 0.1
done
[ "$st" = "done failed" ] || { echo "FAIL: outbox rows are '$st', not 'done failed'"; exit 1; }

chrome=(chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
    --disable-component-update --disable-sync --hide-scrollbars)
fail=0
# $1 = name, $2 = path and query (the token is added); then one grep pattern per argument that must match
# (or, after a `!`, must not).
page() {
    local name=$1 url="http://$admin$2"; shift 2
    url="$url$([[ $url == *\?* ]] && echo '&' || echo '?')token=$admin_token"
    "${chrome[@]}" --user-data-dir="$(mktemp -d)" --window-size=1400,900 --virtual-time-budget=3000 \
        --screenshot="$out/$name-1400.png" "$url" >>"$out/chromium.log" 2>&1
    "${chrome[@]}" --user-data-dir="$(mktemp -d)" --window-size=390,844 --virtual-time-budget=3000 \
        --screenshot="$out/$name-390.png" "$url" >>"$out/chromium.log" 2>&1
    "${chrome[@]}" --user-data-dir="$(mktemp -d)" --virtual-time-budget=3000 --dump-dom "$url" >"$out/$name.html" 2>>"$out/chromium.log"
    for shot in "$out/$name-1400.png" "$out/$name-390.png"; do
        size=$(stat -c %s "$shot" 2>/dev/null || echo 0)
        [ "$size" -ge 10000 ] || { echo "FAIL: $shot missing or trivial ($size bytes)"; fail=1; }
    done
    for pattern in "$@"; do
        if [[ $pattern == '!'* ]]; then
            if grep -q -- "${pattern:1}" "$out/$name.html"; then echo "FAIL: $name page has /${pattern:1}/"; fail=1; fi
        else
            grep -q -- "$pattern" "$out/$name.html" || { echo "FAIL: $name page lacks /$pattern/"; fail=1; }
        fi
    done
    for secret in "$token_a" "$token_b"; do
        if grep -q "$secret" "$out/$name.html"; then echo "FAIL: a webhook token is on the $name page"; fail=1; fi
    done
}

page strategies / 'console-demo' 'paused-one' 'st-paused' 'dec-processed">processed</span> 1' \
    'dec-rejected">rejected</span> 1' 'webhooks/••••••••' 'data-act="rotate"'
page strategy /strategies/console-demo 'alpaca-paper' 'schwab-live' 'AAPL Long 10' 'st-done' 'st-failed' \
    'insufficient buying power' 'No retry: the broker may already hold this order' 'data-act="dismiss"'
page sample '/strategies/console-demo/sample?run=1' 'id="decision" class="dec-processed">processed' \
    'id="status">200' 'id="answer">{"status":"processed"}' 'alpaca-paper · alpaca · place' 'schwab-live · schwab · place'
page logs /logs/console-demo 'class="row lvl-INFO"' 'class="row lvl-ERROR"' 'TSLA' 'refused by the broker' \
    'id="decision"'
# A row opened from the URL shows the full alert and the orders it made.
aapl=$(api '/api/strategies/console-demo/logs?q=parsed%20buy%20AAPL' | python3 -c 'import json,sys; print(json.load(sys.stdin)["logs"][0]["id"])')
page logs-open "/logs/console-demo?open=$aapl" 'Alert: \[' '"instrument": "AAPL"' 'Orders:' 'alpaca-paper place POST /v2/orders \[done\]' \
    'schwab-live place POST /trader/v1/accounts/HASH0123/orders \[failed\]'
page logs-filtered '/logs/console-demo?decision=rejected&q=TSLA' 'TSLA' '!class="row lvl-ERROR"' '!refused by the broker'

# The retry and dismiss endpoints as the Strategy page's buttons call them.
failed=$(api /api/strategies/console-demo/outbox | python3 -c 'import json,sys; print(next(r["id"] for r in json.load(sys.stdin)["outbox"] if r["status"]=="failed"))')
code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $admin_token" "http://$admin/api/strategies/console-demo/outbox/$failed/retry")
[ "$code" = 409 ] || { echo "FAIL: retrying a Schwab place answered $code, not 409"; fail=1; }
code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $admin_token" "http://$admin/api/strategies/console-demo/outbox/$failed/dismiss")
[ "$code" = 200 ] || { echo "FAIL: dismissing answered $code"; fail=1; }
page strategy-dismissed /strategies/console-demo 'st-dismissed'

if [ "$fail" = 0 ]; then
    echo "console-test: ok (screenshots and DOMs in $out)"
    echo "1 passed, 0 failed"
else
    echo "0 passed, 1 failed"
    exit 1
fi
