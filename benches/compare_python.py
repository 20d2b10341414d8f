"""What a user would write instead: a Flask-style handler's core in Python.

JSON decode (json), SHA-256 dedup (hashlib) with a 300 s window, and the same decision
for the same 150-byte alert and strategy rules (allowed instruments, direction switch,
rules for action words, rate limit). No HTTP, no broker formatting: the same work as
`benches/decide.rs`. Prints the median per call in nanoseconds as `python_ns=<n>`.
"""
import hashlib, json, statistics, sys, time

ALERT = b'{"ticker":"NASDAQ:AAPL","action":"buy","direction":"long","price":"190.25","order_type":"limit","duration":"day","metadata":{"message_id":"tv-8c1f2a"}}'
STRATEGY = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "examples/strategies/demo.json"))
ALLOWED = set(STRATEGY["allowed_instruments"])
RULES = STRATEGY["rules"]
DIRECTIONS = STRATEGY["directions"]
seen = {}
rate = []


def handle(body, now):
    while rate and now - rate[0] >= 60_000:
        rate.pop(0)
    if len(rate) >= 10**9:
        return 429, {"error": "rate limit exceeded"}
    rate.append(now)
    try:
        alert = json.loads(body)
    except ValueError:
        alert = None
    mid = (alert or {}).get("metadata", {}).get("message_id") if isinstance(alert, dict) else None
    key = hashlib.sha256(("id:" + mid).encode() if mid else body).digest()
    t = seen.get(key)
    if t is not None and now - t < 300_000:
        return 200, {"status": "duplicate"}
    seen[key] = now
    if not isinstance(alert, dict):
        return 200, {"status": "rejected", "reason": "not an alert"}
    ticker = str(alert.get("ticker") or alert.get("symbol") or alert.get("instrument") or "")
    ticker = ticker.split(":")[-1].upper()
    if ticker.endswith(".P"):
        ticker = ticker[:-2]
    if "{" in ticker or "}" in ticker:
        return 200, {"status": "rejected", "reason": "unresolved placeholder"}
    if ticker not in ALLOWED:
        return 200, {"status": "rejected", "reason": "instrument not allowed"}
    action = str(alert.get("action", "")).lower()
    intent = RULES.get(action) if action in ("buy", "sell", "entry", "exit") else None
    direction = intent.split("_")[1] if intent else str(alert.get("direction", "")).lower()
    if not DIRECTIONS.get(direction, True):
        return 200, {"status": "rejected", "reason": "direction disabled"}
    price = alert.get("price")
    if price is not None:
        from decimal import Decimal
        price = Decimal(str(price))
    return 200, {"status": "processed"}


def main():
    n = 20000
    samples = []
    now = 0
    for _ in range(7):
        start = time.perf_counter_ns()
        for _ in range(n):
            now += 2
            seen.clear() if len(seen) > 1000 else None
            handle(ALERT, now)
        samples.append((time.perf_counter_ns() - start) / n)
    print(f"python_ns={statistics.median(samples):.0f}")


main()
