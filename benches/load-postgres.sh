#!/usr/bin/env bash
# The PostgreSQL mode of benches/load.sh (issue 16): the reference server on a shared PostgreSQL against the
# same server on its embedded SQLite, on loopback, under the same load.
#
#   DB=postgres benches/load.sh   # DURATION=10 CONNECTIONS=50 THREADS=2 RATE=2000 ROUNDS=3 STRATEGIES=16
#                                 # POOL=16 (--database-pool) BOTS=none (BOTS=paper: the demo's two paper bots)
#                                 # PROFILE=1 (a perf profile of every run, system-wide, in target/load-postgres/)
#
# STRATEGIES strategies, each the demo snapshot with a token of its own. Every request is a distinct alert (a
# unique metadata.message_id across rounds, setups and wrk processes, so none is a duplicate), and each wrk
# connection sends its requests round-robin over the strategies' tokens. Three setups, alternated ROUNDS times
# (the machine may be shared: each one's best run counts):
#
#   sqlite       one server on its embedded SQLite database (--synchronous full): the reference;
#   postgres ×1  one server on PostgreSQL (--database);
#   postgres ×3  three servers on the same PostgreSQL database, one wrk each with a third of the connections
#                (what a TCP load balancer in front of them does); req/s summed, the worst p50/p99 of the three.
#
# For each: req/s, p50/p99, non-2xx answers, CPU time per alert of the servers and of PostgreSQL (all its
# processes: the postmaster, its backends and helpers, from /proc, with the exited ones through the
# postmaster's cutime/cstime), PostgreSQL commits per second (pg_stat_database.xact_commit over the run) and WAL
# flushes per second with their mean time (pg_stat_wal). Then the verdict the issue asks for: throughput per
# core, i.e. SQLite's CPU per alert against PostgreSQL's, and whether it is within 2x. Last, a paced run at
# about RATE req/s of each setup for the latency distribution, and each server's own histograms over all its
# runs (/metrics: an alert's wait for a batch, and a batch's transaction from its locks to its commit).
#
# PostgreSQL is Debian's (scripts/setup.sh installs it), initdb'ed into a fresh directory under /tmp, on a free
# loopback port with trust authentication, run as the `postgres` user when this script runs as root (PostgreSQL
# refuses root), stopped and deleted on exit, as the tests' harness does. Unlike the tests' cluster it is
# DURABLE — fsync on, synchronous_commit on, full_page_writes on — because this measures the real thing: an
# alert answered `processed` is a commit flushed to the disk, as SQLite's --synchronous full is. Its other
# settings are PostgreSQL's defaults (max_connections raised to 200, WAL timing on for pg_stat_wal).
#
# By design, one strategy's alerts are serialized across all servers: each server decides and stores its
# alerts in batches, one transaction each, which holds its strategies' advisory locks from the rate counts to
# the commit (that is what makes the 60-a-minute window exact across servers). A strategy therefore takes one
# batch at a time (a few statements and a durable commit for the whole batch); throughput comes from batching
# and from many strategies at once, and the script prints what each one got.
#
# The servers run with --rate-limit 1000000, so every alert is counted in its window: on PostgreSQL a batch
# reads each of its strategies' per-second counts of the last minute plus the marks of the one second the
# window starts in (the script prints how many marks each window holds).
set -euo pipefail

cd "$(dirname "$0")/.."
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-50}
THREADS=${THREADS:-2}
RATE=${RATE:-2000}
ROUNDS=${ROUNDS:-3}
STRATEGIES=${STRATEGIES:-16}
POOL=${POOL:-16}
BOTS=${BOTS:-none}
THREE_OPTS=${THREE_OPTS:-}
target="${CARGO_TARGET_DIR:-target}"
work="$target/load-postgres"
rm -rf "$work"
mkdir -p "$work/strategies"
work=$(cd "$work" && pwd)
# A database URL in the environment would put the SQLite reference on PostgreSQL too.
unset SWH_DATABASE
# Nor may PG* variables send the client programs to another server, user or database.
for v in $(compgen -e); do case $v in PG*) unset "$v" ;; esac; done

# PostgreSQL's programs: the newest version under Debian's /usr/lib/postgresql, else initdb's directory on PATH.
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
if [ -z "$pgbin" ] || [ ! -x "$pgbin/initdb" ]; then
    pgbin=$(command -v initdb >/dev/null 2>&1 && dirname "$(readlink -f "$(command -v initdb)")" || true)
fi
if [ -z "$pgbin" ] || [ ! -x "$pgbin/initdb" ] || [ ! -x "$pgbin/postgres" ]; then
    echo "PostgreSQL is not installed (no initdb under /usr/lib/postgresql/*/bin or on PATH): run scripts/setup.sh" >&2
    exit 1
fi
psql_bin="$pgbin/psql"
[ -x "$psql_bin" ] || psql_bin=$(command -v psql || true)
[ -n "$psql_bin" ] || { echo "psql is not installed: run scripts/setup.sh" >&2; exit 1; }
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    echo "PostgreSQL refuses to run as root and there is no \`postgres\` user: run scripts/setup.sh" >&2
    exit 1
fi
if ! command -v wrk >/dev/null 2>&1; then
    echo "installing wrk…"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi

cargo build --quiet --release -p strategy-webhook-server
server="$target/release/strategy-webhook-server"

# Everything started here is stopped on exit, PostgreSQL last (the servers hold connections to it).
pids=() wrk_jobs=()
pgdir="" pg_pid="" settle_pid=""
cleanup() {
    local p
    # A run cut short: its wrk processes (each in a subshell that times it) go first.
    for p in "${wrk_jobs[@]}"; do kill $(pgrep -P "$p" || true) "$p" 2>/dev/null || true; done
    [ -n "$settle_pid" ] && kill "$settle_pid" 2>/dev/null
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ -n "$pg_pid" ] && kill -0 "$pg_pid" 2>/dev/null; then
        # Fast shutdown (what `pg_ctl stop` does); a cluster that hangs is taken down hard after 30 s.
        kill -INT "$pg_pid" 2>/dev/null || true
        for _ in $(seq 300); do kill -0 "$pg_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pg_pid" 2>/dev/null || true
        wait "$pg_pid" 2>/dev/null || true
    fi
    [ -n "$pgdir" ] && rm -rf "$pgdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- PostgreSQL --------------------------------------------------------------------------------------------
# Under /tmp: short (the Unix socket's path must fit in 107 bytes), and the postgres user may not be able to
# enter the target directory.
pgdir=$(mktemp -d /tmp/swh-load-pg.XXXXXX)
as_pg() { # runs a server program as the postgres user when root, in $pgdir (PostgreSQL looks its cwd up)
    if [ "$(id -u)" = 0 ]; then
        (cd "$pgdir" && exec setpriv --reuid=postgres --regid=postgres --init-groups \
            env HOME="$pgdir" USER=postgres LOGNAME=postgres "$@")
    else
        (cd "$pgdir" && exec "$@")
    fi
}
[ "$(id -u)" = 0 ] && chown postgres: "$pgdir"
# Durable initdb too (no --no-sync). --locale=C: the machine's locale may not be generated.
as_pg "$pgbin/initdb" -D "$pgdir/data" -A trust -U swh -E UTF8 --locale=C >"$work/initdb.log" 2>&1 ||
    { cat "$work/initdb.log"; echo "initdb failed"; exit 1; }
# PG_OPTS: more settings for PostgreSQL, e.g. "-c shared_preload_libraries=pg_stat_statements" (with
# STATEMENTS=1, the statements that cost most are printed at the end).
read -r -a pg_opts <<<"${PG_OPTS:-}"
if [ "${STATEMENTS:-0}" = 1 ]; then pg_opts+=(-c shared_preload_libraries=pg_stat_statements); fi
pg_port=""
for _ in $(seq 10); do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    if [ "$(id -u)" = 0 ]; then
        (cd "$pgdir" && exec setpriv --reuid=postgres --regid=postgres --init-groups \
            env HOME="$pgdir" USER=postgres LOGNAME=postgres "$pgbin/postgres" -D "$pgdir/data" -p "$port" \
            -c listen_addresses=127.0.0.1 -c unix_socket_directories="$pgdir" -c max_connections=200 \
            -c fsync=on -c synchronous_commit=on -c full_page_writes=on -c track_wal_io_timing=on "${pg_opts[@]}") \
            >"$work/postgres.log" 2>&1 &
    else
        (cd "$pgdir" && exec "$pgbin/postgres" -D "$pgdir/data" -p "$port" \
            -c listen_addresses=127.0.0.1 -c unix_socket_directories="$pgdir" -c max_connections=200 \
            -c fsync=on -c synchronous_commit=on -c full_page_writes=on -c track_wal_io_timing=on "${pg_opts[@]}") \
            >"$work/postgres.log" 2>&1 &
    fi
    pg_pid=$!
    for _ in $(seq 600); do
        kill -0 "$pg_pid" 2>/dev/null || break
        "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$port" -U swh -d postgres && { pg_port=$port; break; }
        sleep 0.05
    done
    [ -n "$pg_port" ] && break
    if kill -0 "$pg_pid" 2>/dev/null; then cat "$work/postgres.log"; echo "PostgreSQL did not start within 30 s"; exit 1; fi
    wait "$pg_pid" 2>/dev/null || true
    pg_pid=""
    # Only a port taken in between is worth another try.
    grep -q "could not bind" "$work/postgres.log" || { cat "$work/postgres.log"; echo "PostgreSQL did not start"; exit 1; }
done
[ -n "$pg_port" ] || { cat "$work/postgres.log"; echo "PostgreSQL found no free port"; exit 1; }
sql() { "$psql_bin" -h 127.0.0.1 -p "$pg_port" -U swh -d "$1" -XAt -c "$2"; }
pg_version=$(sql postgres "SHOW server_version")
pg_durable=$(sql postgres "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings
    WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'wal_sync_method')")
# One database per setup, so that each one's rows, rate windows and commit counts are its own.
"$pgbin/createdb" -h 127.0.0.1 -p "$pg_port" -U swh one
"$pgbin/createdb" -h 127.0.0.1 -p "$pg_port" -U swh three

# --- strategies and servers ----------------------------------------------------------------------------------
python3 - "$work/strategies" "$STRATEGIES" "$BOTS" >"$work/tokens" <<'EOF'
import hashlib, json, os, sys
out, n, bots = sys.argv[1], int(sys.argv[2]), sys.argv[3]
demo = json.load(open("examples/strategies/demo.json"))
for i in range(1, n + 1):
    snap = dict(demo)
    sid = "load-%02d" % i
    token = hashlib.sha256(("load token %d" % i).encode()).hexdigest()
    snap.update(id=sid, name="load test %d" % i, token_hash=token)
    if bots != "paper":
        snap["bots"] = []
    json.dump(snap, open(os.path.join(out, sid + ".json"), "w"))
    print(token)
EOF

declare -A pid_of port_of
start_server() { # name [database] [extra server options…] -> pid_of[name], port_of[name]
    local name=$1 db=${2:-} dir="$work/$1"
    shift $(($# < 2 ? $# : 2))
    local args=(--listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --strategies "$work/strategies"
        --data-dir "$dir/data" --port-file "$dir/ports.json" --rate-limit 1000000 --synchronous full
        --max-connections-per-address 100000 --max-in-flight-per-address 100000 --max-in-flight 100000)
    [ -n "$db" ] && args+=(--database "postgres://swh@127.0.0.1:$pg_port/$db" --database-pool "$POOL")
    args+=("$@")
    mkdir -p "$dir/data"
    RUST_LOG=warn "$server" "${args[@]}" >"$dir/server.out" 2>"$dir/server.err" &
    pid_of[$name]=$!
    pids+=($!)
    for _ in $(seq 300); do [ -s "$dir/ports.json" ] && break; sleep 0.05; done
    [ -s "$dir/ports.json" ] || { cat "$dir/server.err"; echo "server $name did not start"; exit 1; }
    port_of[$name]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["webhook"].split(":")[-1])' \
        "$dir/ports.json")
}

start_server sqlite
start_server one one
# One at a time: the first applies the migrations (the others would wait for its lock anyway).
start_server three-a three $THREE_OPTS
start_server three-b three $THREE_OPTS
start_server three-c three $THREE_OPTS

# A wrk script per run: thread id + counter + the run's label make every message_id unique; `offset` spreads
# the wrk processes of one run over different tokens.
lua() { # label offset [delay ms] -> script path
    local f="$work/lua/$1.lua"
    mkdir -p "$work/lua"
    {
        printf 'local tokens = {'
        printf '"%s",' $(cat "$work/tokens")
        printf '}\n'
        printf 'local label, offset = "%s", %d\n' "$1" "$2"
        cat <<'EOF'
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local n = 0
function request()
  n = n + 1
  local token = tokens[(n + tid + offset) % #tokens + 1]
  local body = string.format('{"ticker":"AAPL","action":"buy","metadata":{"message_id":"%s-%d-%d"}}', label, tid, n)
  return wrk.format("POST", "/webhooks/" .. token, { ["Content-Type"] = "application/json" }, body)
end
EOF
        [ -n "${3:-}" ] && echo "function delay() return $3 end"
    } >"$f"
    echo "$f"
}

# --- measuring -----------------------------------------------------------------------------------------------
hz=$(getconf CLK_TCK)
stat_fields() { # pid -> /proc/PID/stat's fields after the command name (which may hold spaces)
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    echo "${s##*) }"
}
server_ticks() { # pids -> user + system ticks of those processes (every thread, living or gone)
    local total=0 p f
    for p in "$@"; do
        f=($(stat_fields "$p"))
        [ ${#f[@]} -gt 12 ] && total=$((total + f[11] + f[12]))
    done
    echo "$total"
}
pg_ticks() { # ticks of the postmaster, of its children living now, and of those gone (its cutime/cstime)
    local f total p
    f=($(stat_fields "$pg_pid"))
    total=$((f[11] + f[12] + f[13] + f[14]))
    for p in $(pgrep -P "$pg_pid" || true); do
        f=($(stat_fields "$p"))
        [ ${#f[@]} -gt 12 ] && total=$((total + f[11] + f[12]))
    done
    echo "$total"
}
# A backend publishes its counts (pg_stat_database, pg_stat_wal) at most once a second while busy, and once
# idle within PGSTAT_IDLE_INTERVAL (10 s): the counts after a run are read once that has passed. What the idle
# servers' polls commit meanwhile is in them too (a few per second, against thousands).
# In the background, so that a signal meanwhile stops the script at once.
settle() { sleep 11 & settle_pid=$!; wait "$settle_pid"; settle_pid=""; }
commits() { sql postgres "SELECT coalesce(sum(xact_commit), 0) FROM pg_stat_database WHERE datname = '$1'"; }
wal() { sql postgres "SELECT wal_sync || ' ' || wal_sync_time FROM pg_stat_wal"; }

# measure LABEL DB DELAY SERVER… : one run of wrk per server at once, the connections split between them.
# Sets $sum to LABEL.sum, which holds: req/s p50 p99 (ms, worst server) non2xx socket-errors requests, CPU µs
# per alert of the servers, of PostgreSQL and of wrk, commits/s, WAL flushes/s, mean WAL flush ms, and the rate
# marks per strategy in the last minute when the run ended (what each alert's rate count reads). It runs in this
# shell, not in a $(…), so that a signal stops the script at once.
measure() {
    local label=$1 db=$2 delay=$3
    shift 3
    local names=("$@") n=$# i conns threads out s0 s1 p0 p1 c0 c1 w0 w1 marks=0 srv=()
    for i in "${!names[@]}"; do srv+=("${pid_of[${names[$i]}]}"); done
    # The SQLite reference counts no PostgreSQL (which only serves the idle servers' polls meanwhile).
    s0=$(server_ticks "${srv[@]}") p0=0 p1=0 c0=0 c1=0 w0="0 0" w1="0 0"
    [ -n "$db" ] && { p0=$(pg_ticks) c0=$(commits "$db") w0=$(wal); }
    for i in "${!names[@]}"; do
        conns=$((CONNECTIONS / n + (i < CONNECTIONS % n ? 1 : 0)))
        threads=$((THREADS / n > 0 ? THREADS / n : 1))
        out="$work/$label.$i"
        (
            TIMEFORMAT='%U %S'
            { time wrk -t"$threads" -c"$conns" -d"${DURATION}s" --latency \
                -s "$(lua "$label-$i" "$((i * 5))" "$delay")" "https://127.0.0.1:${port_of[${names[$i]}]}/" \
                >"$out" 2>&1; } 2>"$out.time"
        ) &
        wrk_jobs+=($!)
    done
    # PROFILE=1: a system-wide CPU profile of each run (perf, call graphs), beside wrk's outputs.
    local perf_pid=""
    if [ "${PROFILE:-0}" = 1 ] && command -v perf >/dev/null; then
        perf record -q -F 499 -a -g -o "$work/$label.perf" -- sleep "$((DURATION > 3 ? DURATION - 2 : 1))" \
            >/dev/null 2>&1 &
        perf_pid=$!
    fi
    for i in "${!wrk_jobs[@]}"; do wait "${wrk_jobs[$i]}" || { cat "$work/$label.$i"; echo "wrk failed"; exit 1; }; done
    wrk_jobs=()
    if [ -n "$perf_pid" ]; then
        # perf may be refused (perf_event_paranoid): the run's figures stand without its profile.
        wait "$perf_pid" 2>/dev/null || echo "perf record failed: no profile for this run" >&2
    fi
    s1=$(server_ticks "${srv[@]}")
    if [ -n "$db" ]; then
        p1=$(pg_ticks)
        marks=$(sql "$db" "SELECT count(*) / $STRATEGIES FROM rate_marks
            WHERE ts_ms > (extract(epoch FROM now()) * 1000)::bigint - 60000")
        settle
        c1=$(commits "$db") w1=$(wal)
    fi
    for i in "${!names[@]}"; do
        out="$work/$label.$i"
        awk -v t="$(cat "$out.time")" '
            function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0;
                             if (v ~ /m$/) return v * 60000; if (v ~ /s$/) return v * 1000; return v + 0 }
            /^Requests\/sec:/ { rps = $2 }
            /requests in/ { n = $1 }
            $1 == "50%" { p50 = ms($2) }
            $1 == "99%" { p99 = ms($2) }
            /Non-2xx or 3xx responses:/ { bad = $5 }
            /Socket errors:/ { gsub(",", ""); err = $4 + $6 + $8 + $10 }
            END { split(t, w, " "); print rps, p50, p99, bad + 0, err + 0, n, w[1] + w[2] }' "$out"
    done >"$work/$label.servers"
    awk -v s="$((s1 - s0))" -v p="$((p1 - p0))" -v c="$((c1 - c0))" -v w0="$w0" -v w1="$w1" -v hz="$hz" \
        -v d="$DURATION" -v marks="$marks" '
        { rps += $1; if ($2 > p50) p50 = $2; if ($3 > p99) p99 = $3; bad += $4; err += $5; n += $6; wrk += $7 }
        END {
            split(w0, a, " "); split(w1, b, " "); syncs = b[1] - a[1]
            printf "%.0f %.2f %.2f %d %d %d %.1f %.1f %.1f %.0f %.0f %.2f %d\n", rps, p50, p99, bad, err, n,
                s / hz * 1e6 / n, p / hz * 1e6 / n, wrk * 1e6 / n, c / d, syncs / d,
                (syncs > 0) ? (b[2] - a[2]) / syncs : 0, marks
        }' "$work/$label.servers" >"$work/$label.sum"
    sum="$work/$label.sum"
}
field() { cut -d' ' -f"$2" "$1"; }
best() { # .sum files -> the one with the highest req/s
    local best_file="" best_rps=-1 f r
    for f in "$@"; do
        r=$(field "$f" 1)
        if [ "$r" -gt "$best_rps" ]; then best_rps=$r; best_file=$f; fi
    done
    echo "$best_file"
}

echo "PostgreSQL $pg_version on 127.0.0.1:$pg_port ($pg_durable), $STRATEGIES strategies, BOTS=$BOTS," \
    "pool $POOL per server; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# Warm up each server (TLS sessions, allocators, pools, page cache).
for name in sqlite one three-a three-b three-c; do
    wrk -t1 -c4 -d2s -s "$(lua "warm-$name" 0)" "https://127.0.0.1:${port_of[$name]}/" >"$work/warm-$name.txt" 2>&1 || true
done
settle
idle1=$(sql postgres "SELECT sum(xact_commit) FROM pg_stat_database WHERE datname IN ('one', 'three')")
settle
idle2=$(sql postgres "SELECT sum(xact_commit) FROM pg_stat_database WHERE datname IN ('one', 'three')")
echo "idle: the four servers on PostgreSQL commit $(awk -v a="$idle1" -v b="$idle2" 'BEGIN { printf "%.1f", (b - a) / 11 }') times a second between runs (polls)"

a_runs=() b_runs=() c_runs=()
for r in $(seq "$ROUNDS"); do
    measure "full-$r-sqlite" "" "" sqlite
    a_runs+=("$sum")
    measure "full-$r-pg1" one "" one
    b_runs+=("$sum")
    measure "full-$r-pg3" three "" three-a three-b three-c
    c_runs+=("$sum")
    echo "round $r: sqlite $(field "${a_runs[-1]}" 1) req/s, postgres ×1 $(field "${b_runs[-1]}" 1) req/s," \
        "postgres ×3 $(field "${c_runs[-1]}" 1) req/s"
done
a=$(best "${a_runs[@]}") b=$(best "${b_runs[@]}") c=$(best "${c_runs[@]}")
delay=$((CONNECTIONS * 1000 / RATE))
measure paced-sqlite "" "$delay" sqlite
a_paced=$sum
measure paced-pg1 one "$delay" one
b_paced=$sum
measure paced-pg3 three "$delay" three-a three-b three-c
c_paced=$sum
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

row() { # name .sum
    local f=$2
    printf '%-12s %8s %8s %8s %7s %7s %9s %9s %9s %7s %9s %9s\n' "$1" "$(field "$f" 1)" "$(field "$f" 2)" \
        "$(field "$f" 3)" "$(field "$f" 4)" "$(field "$f" 5)" "$(field "$f" 7)" "$(field "$f" 8)" \
        "$(awk -v s="$(field "$f" 7)" -v p="$(field "$f" 8)" 'BEGIN { printf "%.1f", s + p }')" "$(field "$f" 9)" \
        "$(field "$f" 10)" "$(field "$f" 11) $(field "$f" 12)"
}
header() {
    printf '%-12s %8s %8s %8s %7s %7s %9s %9s %9s %7s %9s %9s\n' setup req/s "p50 ms" "p99 ms" non-2xx \
        sockerr "server µs" "pg µs" "total µs" "wrk µs" commits/s "WAL/s ms"
}
echo
echo "== full load: $CONNECTIONS connections, distinct alerts round-robin over $STRATEGIES strategies," \
    "${DURATION}s, best of $ROUNDS =="
header
row sqlite "$a"
row "postgres ×1" "$b"
row "postgres ×3" "$c"
echo "(µs: CPU time per alert; ×3: req/s summed, the worst server's p50/p99; WAL/s ms: WAL flushes per second" \
    "and their mean time)"
a_cpu=$(awk -v s="$(field "$a" 7)" -v p="$(field "$a" 8)" 'BEGIN { print s + p }')
verdict() { # name .sum
    awk -v n="$1" -v s="$(field "$2" 7)" -v p="$(field "$2" 8)" -v a="$a_cpu" -v rps="$(field "$2" 1)" \
        -v k="$STRATEGIES" -v marks="$(field "$2" 13)" 'BEGIN {
        t = s + p
        printf "%s: %.1f µs CPU per alert against %.1f µs on SQLite: throughput per core %.0f %% of SQLite, %s 2x;",
            n, t, a, 100 * a / t, (t <= 2 * a) ? "within" : "NOT within"
        printf " %.0f alerts/s per strategy (one per %.2f ms), its window holding ~%d rate marks\n",
            rps / k, k * 1000 / rps, marks }'
}
echo
verdict "postgres ×1" "$b"
verdict "postgres ×3" "$c"
echo "Note: this machine has $(nproc) cores; the servers, PostgreSQL and wrk share them, so req/s is what is left" \
    "after wrk and the neighbours (load average $load_after after the runs); CPU per alert is the figure that"
echo "compares. One strategy's alerts are serialized across servers (its lock is held to the durable commit, which" \
    "keeps the rate window exact): per-strategy throughput is bounded by commit latency by design."
echo
echo "== paced: about $RATE req/s over $CONNECTIONS connections =="
header
row sqlite "$a_paced"
row "postgres ×1" "$b_paced"
row "postgres ×3" "$c_paced"
echo "(closed loop: each connection waits ${delay} ms after each answer, so a setup reaches about" \
    "$CONNECTIONS / (${delay} ms + its latency) req/s; far below $RATE, its latency is a queue's)"
echo
echo "== stored on PostgreSQL =="
answered() { # wrk outputs -> requests answered 2xx
    awk '/requests in/ { n += $1 } /Non-2xx or 3xx responses:/ { n -= $5 } END { print n + 0 }' "$@"
}
for db in one three; do
    case $db in
        one) files=("$work"/full-*-pg1.[0-9] "$work"/paced-pg1.[0-9] "$work/warm-one.txt") ;;
        three) files=("$work"/full-*-pg3.[0-9] "$work"/paced-pg3.[0-9] "$work"/warm-three-?.txt) ;;
    esac
    # An alert's log rows share its canonical alerts, which hold its message_id.
    echo "$db: $(answered "${files[@]}") alerts answered 2xx (warm-ups included);" \
        "$(sql "$db" "SELECT count(DISTINCT alerts) FROM logs WHERE decision = 'processed'") stored processed" \
        "(more: in flight when wrk stopped); log rows $(sql "$db" "SELECT coalesce(string_agg(decision || ' ' || n, ', '),
        'none') FROM (SELECT decision, count(*) AS n FROM logs GROUP BY decision ORDER BY decision) d")"
done
if [ "${STATEMENTS:-0}" = 1 ]; then
    for db in one three; do
        sql "$db" "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
        echo "== $db: the statements that cost PostgreSQL most (all runs) =="
        sql "$db" "SELECT lpad(calls::TEXT, 8) || lpad(round((total_exec_time + total_plan_time)::NUMERIC / calls * 1000)::TEXT, 7)
                   || ' µs/call' || lpad(round(rows::NUMERIC / calls)::TEXT, 5) || ' rows/call'
                   || lpad(round(wal_fpi::NUMERIC / calls, 1)::TEXT, 6) || ' FPI/call  '
                   || left(regexp_replace(query, '\s+', ' ', 'g'), 90)
                   FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$db')
                   ORDER BY total_exec_time + total_plan_time DESC LIMIT 12"
    done
    echo "WAL of the whole cluster (all runs): $(sql postgres "SELECT wal_records || ' records, ' || wal_fpi
        || ' full-page images, ' || pg_size_pretty(wal_bytes) FROM pg_stat_wal")"
fi
# Each server's own figures over all its runs: how long its transactions took (on PostgreSQL a batch's, from its
# locks to its durable commit, which is how long it kept its strategies from the other servers' batches) and how
# long an alert waited in the queue for one.
echo "== the servers' own figures (all runs, from /metrics) =="
: >"$work/metrics-none.txt"
for name in sqlite one three-a three-b three-c; do
    python3 benches/histograms.py scrape "$work/$name" "$work/$name/metrics.txt"
    echo "$name:"
    python3 benches/histograms.py "$work/metrics-none.txt" "$work/$name/metrics.txt" \
        store_queue_seconds store_transaction_seconds commit_seconds | tail -n +2 || true
done
for name in sqlite one three-a three-b three-c; do
    n=$(grep -c . "$work/$name/server.err" || true)
    [ "$n" -gt 0 ] && { echo "server $name logged $n lines at WARN or above, first:"; head -n3 "$work/$name/server.err"; }
done
echo "(raw wrk output and server logs in $work/)"
