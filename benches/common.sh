# Shared by benches/load.sh and benches/newconn.sh (sourced, from the repository's root): the one-server
# set-up both measure against nginx. Each function says what it sets.

# Installs the Debian packages of the commands that are missing: `need_commands wrk:wrk nginx:nginx-light`.
need_commands() {
    local missing=() pair
    for pair in "$@"; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${pair%%:*}" ] || missing+=("${pair##*:}")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing ${missing[*]}…"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# The demo strategy as `load` with `token`, without its bots unless BOTS=paper: file token name.
write_load_strategy() {
    python3 - "$1" "$2" "$3" "$BOTS" <<'EOF'
import json, sys
snap = json.load(open("examples/strategies/demo.json"))
snap.update(id="load", name=sys.argv[3], token_hash=sys.argv[2])
if sys.argv[4] != "paper":
    snap["bots"] = []
json.dump(snap, open(sys.argv[1], "w"))
EOF
}

# Processes to stop on exit.
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# Starts `$server` on $work's strategies and data (--rate-limit 1000000, --synchronous $SYNC, the per-address caps
# lifted: one load client is one address), waits until it listens; sets server_pid and server_port.
start_server() {
    RUST_LOG=warn "$server" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --strategies "$work/strategies" \
        --data-dir "$work/data" --port-file "$work/ports.json" --rate-limit 1000000 --synchronous "$SYNC" \
        --max-connections-per-address 100000 --max-in-flight-per-address 100000 --max-in-flight 100000 \
        >"$work/server.out" 2>"$work/server.err" &
    server_pid=$!
    pids+=($server_pid)
    for _ in $(seq 200); do [ -s "$work/ports.json" ] && break; sleep 0.05; done
    [ -s "$work/ports.json" ] || { cat "$work/server.err"; echo "the server did not start"; exit 1; }
    server_port=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["webhook"].split(":")[-1])' \
        "$work/ports.json")
}

# Starts nginx with the server's own certificate, one worker per core, answering what the server answers:
# worker_connections, then extra lines for the http block and for the server block. Sets nginx_pid, nginx_port.
start_nginx() {
    local nginx_bin
    nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
    nginx_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mkdir -p "$work/nginx"
    cat >"$work/nginx/nginx.conf" <<EOF
worker_processes auto;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections $1; }
http {
    access_log off;
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    fastcgi_temp_path $work/nginx/fastcgi;
    uwsgi_temp_path $work/nginx/uwsgi;
    scgi_temp_path $work/nginx/scgi;
    $2
    server {
        listen 127.0.0.1:$nginx_port ssl;
        ssl_certificate $work/data/cert.pem;
        ssl_certificate_key $work/data/key.pem;
        $3
        location / {
            default_type application/json;
            return 200 '{"status":"processed"}';
        }
    }
}
EOF
    "$nginx_bin" -p "$work/nginx" -c "$work/nginx/nginx.conf" 2>"$work/nginx/stderr.log" &
    nginx_pid=$!
    pids+=($nginx_pid)
    for _ in $(seq 100); do curl -sk "https://127.0.0.1:$nginx_port/" >/dev/null 2>&1 && break; sleep 0.05; done
}

# CPU time (clock ticks) of a process and its threads, plus its children (nginx's workers).
ticks() {
    local total=0 p t
    for p in "$1" $(pgrep -P "$1" || true); do
        for t in /proc/"$p"/task/*/stat; do
            [ -r "$t" ] && total=$((total + $(awk '{ print $14 + $15 }' "$t")))
        done
    done
    echo "$total"
}
hz=$(getconf CLK_TCK)
