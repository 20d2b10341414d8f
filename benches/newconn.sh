#!/usr/bin/env bash
# New-connection benchmark: every alert on a fresh TLS 1.3 connection (how webhook senders connect), against the
# reference server and against nginx answering a fixed 200 JSON, both on loopback with the same certificate, on
# the same run.
#
#   benches/newconn.sh            # DURATION=10 WORKERS=300 THREADS=2 ROUNDS=2 BOTS=none by default
#   BOTS=paper benches/newconn.sh # the demo's two bots on the paper broker
#   SERVER_BIN=path benches/newconn.sh  # another build of the server (to compare before and after a change)
#
# The client is examples/server/benches/newconn.rs: WORKERS concurrent workers, each opening a connection,
# handshaking, posting one distinct alert with `Connection: close`, reading the answer and closing, for DURATION
# seconds. With resumption on, each worker keeps its own session store, so every connection after its first
# offers a TLS 1.3 ticket; with it off every handshake is a full one (ECDHE and the ECDSA P-256 signature).
# 300 workers by default: webhook senders are many distinct clients, more than a server-side session cache of
# rustls' default size (256 sessions) keeps, which only stateless tickets resume.
# nginx is set up as the server is: the same ECDSA P-256 certificate and key, TLS 1.2 and 1.3, stateless
# session tickets on (`ssl_session_tickets on`, no session cache), one worker per core. Rounds alternate nginx
# and the server and keep each one's best run, so that a burst of someone else's work does not decide the ratio.
#
# The server runs as benches/load.sh runs it (--rate-limit 1000000, synchronous FULL), so each alert is parsed,
# decided, deduplicated and answered `processed` only once its dedup key, rate mark and log rows are committed.
# Installs nginx-light with apt when missing (as root). Everything listens on 127.0.0.1 only and stops by itself.
set -euo pipefail

cd "$(dirname "$0")/.."
DURATION=${DURATION:-10}
WORKERS=${WORKERS:-300}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
BOTS=${BOTS:-none}
SYNC=${SYNC:-full}
target="${CARGO_TARGET_DIR:-target}"
work="$target/newconn"
rm -rf "$work"
mkdir -p "$work/strategies" "$work/data"
work=$(cd "$work" && pwd)

source benches/common.sh
need_commands nginx:nginx-light

cargo build --quiet --release -p strategy-webhook-server
server="${SERVER_BIN:-$target/release/strategy-webhook-server}"
client=$(cargo bench --quiet -p strategy-webhook-server --bench newconn --no-run --message-format=json |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "newconn" and m.get("executable"):
        print(m["executable"])')
[ -x "$client" ] || { echo "the newconn client was not built"; exit 1; }

token=$(printf 'e%.0s' $(seq 64))
write_load_strategy "$work/strategies/load.json" "$token" "new connections"
start_server
# Stateless TLS session tickets and TLS 1.3, as the server has them (the certificate is the server's ECDSA P-256).
start_nginx 4096 "" "ssl_protocols TLSv1.2 TLSv1.3; ssl_session_tickets on;"

path="/webhooks/$token"
run() { # name port resume(on|off) pid -> output file; the client's line, then the target's CPU µs per alert
    local out="$work/$1.txt" before after
    before=$(ticks "$4")
    "$client" --addr "127.0.0.1:$2" --path "$path" --ca "$work/data/cert.pem" --workers "$WORKERS" \
        --threads "$THREADS" --seconds "$DURATION" --resume "$3" --label "$1" >"$out" 2>&1 || { cat "$out"; exit 1; }
    after=$(ticks "$4")
    awk -v b="$before" -v a="$after" -v hz="$hz" '
        { for (i = 1; i <= NF; i++) if ($i ~ /^\(/ && $(i + 1) == "answered") n = substr($i, 2) }
        END { printf "%.1f\n", n ? (a - b) / hz * 1e6 / n : 0 }' "$out" >"$out.cpu"
    echo "$out"
}
rate() { awk '{ for (i = 1; i <= NF; i++) if ($(i + 1) == "alerts/s") { print $i; exit } }' "$1"; }
resumed() { grep -o '[0-9.]* % of handshakes resumed' "$1" | cut -d' ' -f1; }
errors() { grep -o '[0-9]* non-200, [0-9]* errors' "$1"; }
best() { # output files -> the one with the highest rate
    local best_file="" best_rate=0 f r
    for f in "$@"; do
        r=$(rate "$f")
        if awk -v a="$r" -v b="$best_rate" 'BEGIN { exit !(a > b) }'; then best_rate=$r; best_file=$f; fi
    done
    echo "$best_file"
}

# Warm up both (page cache, allocators, the server's first strategy turn).
"$client" --addr "127.0.0.1:$nginx_port" --path "$path" --ca "$work/data/cert.pem" --workers 4 --seconds 1 >/dev/null
"$client" --addr "127.0.0.1:$server_port" --path "$path" --ca "$work/data/cert.pem" --workers 4 --seconds 1 >/dev/null

declare -A runs
for i in $(seq "$ROUNDS"); do
    for resume in off on; do
        n=$(run "nginx-$resume-$i" "$nginx_port" "$resume" "$nginx_pid")
        s=$(run "server-$resume-$i" "$server_port" "$resume" "$server_pid")
        runs[nginx-$resume]+=" $n"
        runs[server-$resume]+=" $s"
        echo "round $i, resumption $resume: nginx $(rate "$n") alerts/s ($(cat "$n.cpu") µs CPU/alert)," \
            "server $(rate "$s") alerts/s ($(cat "$s.cpu") µs CPU/alert)"
    done
done

echo
echo "== a new TLS 1.3 connection per alert: $WORKERS workers, ${DURATION}s, distinct alerts, best of $ROUNDS (BOTS=$BOTS SYNC=$SYNC) =="
printf '%-7s %-10s %12s %16s %12s   %s\n' target resumption alerts/s "CPU µs/alert" resumed "answers"
for resume in off on; do
    # shellcheck disable=SC2086
    n=$(best ${runs[nginx-$resume]}) s=$(best ${runs[server-$resume]})
    for f in "$n" "$s"; do
        printf '%-7s %-10s %12s %16s %11s%%   %s\n' "$(basename "$f" | cut -d- -f1)" "$resume" "$(rate "$f")" \
            "$(cat "$f.cpu")" "$(resumed "$f")" "$(errors "$f")"
    done
    echo "server / nginx, resumption $resume: $(awk -v s="$(rate "$s")" -v n="$(rate "$n")" 'BEGIN { printf "%.1f", 100 * s / n }') %  (goal ≥ 100 %)"
done
echo "(raw client output in $work/)"
