#!/usr/bin/env python3
"""Prints what Prometheus histograms of the server recorded between two scrapes of its /metrics.

    histograms.py BEFORE AFTER NAME...   (NAME without the `swh_` prefix, e.g. store_transaction_seconds)
    histograms.py scrape DIR FILE        (DIR: a server's --port-file `ports.json` and --data-dir `data/`)

For each: the observations between the scrapes, their mean, and p50/p90/p99 interpolated within the buckets as
Prometheus' histogram_quantile does (the buckets are powers of two apart: a quantile is an estimate inside its
bucket, never outside it).
"""
import json
import re
import sys
import urllib.request


def read(path):
    """Bucket counts, sums and counts of every histogram in a text-format scrape: name -> (buckets, sum, count)."""
    buckets, sums, counts = {}, {}, {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r'^(swh_\w+)_bucket\{le="([^"]+)"\} (\S+)$', line)
            if m:
                le = float("inf") if m.group(2) == "+Inf" else float(m.group(2))
                buckets.setdefault(m.group(1), {})[le] = float(m.group(3))
                continue
            m = re.match(r"^(swh_\w+)_(sum|count) (\S+)$", line)
            if m:
                (sums if m.group(2) == "sum" else counts)[m.group(1)] = float(m.group(3))
    return {n: (buckets[n], sums.get(n, 0.0), counts.get(n, 0.0)) for n in buckets}


def quantile(q, bounds, cumulative):
    """histogram_quantile: linear inside the bucket the rank falls in, as text. In the first bucket only its bound
    is known ("< 50 µs"); past the last finite bound, only that bound ("> 1.64 s")."""
    total = cumulative[-1]
    rank = q * total
    lower, below = None, 0.0
    for le, c in zip(bounds, cumulative):
        if c >= rank:
            if lower is None:
                return "< " + fmt(le)
            if le == float("inf"):
                return "> " + fmt(lower)
            return fmt(lower + (le - lower) * ((rank - below) / (c - below) if c > below else 1.0))
        lower, below = le, c
    return "> " + fmt(lower)


def fmt(seconds):
    return f"{seconds * 1e6:.0f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def scrape(directory, path):
    """Saves the server's /metrics (its admin listener, with its admin token) to `path`; an empty file when the
    server does not answer, so that a benchmark's figures stand without these."""
    text = ""
    try:
        with open(f"{directory}/ports.json", encoding="utf-8") as f:
            admin = json.load(f)["admin"]
        with open(f"{directory}/data/admin-token", encoding="utf-8") as f:
            token = f.read().strip()
        req = urllib.request.Request(f"http://{admin}/metrics", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode("utf-8")
    except (OSError, KeyError, ValueError) as e:
        print(f"no metrics from the server in {directory}: {e}", file=sys.stderr)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "scrape":
        scrape(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    before, after = read(sys.argv[1]), read(sys.argv[2])
    print("the server's own figures over the run (/metrics):")
    for short in sys.argv[3:]:
        name = "swh_" + short
        if name not in after:
            print(f"  {short:28} not in the scrape")
            continue
        b_buckets, b_sum, b_count = before.get(name, ({}, 0.0, 0.0))
        a_buckets, a_sum, a_count = after[name]
        n = a_count - b_count
        if n <= 0:
            print(f"  {short:28} no observation")
            continue
        bounds = sorted(a_buckets)
        cumulative = [a_buckets[le] - b_buckets.get(le, 0.0) for le in bounds]
        qs = "  ".join(f"p{int(q * 100)} {quantile(q, bounds, cumulative)}" for q in (0.5, 0.9, 0.99))
        print(f"  {short:28} {int(n):>8} observed  mean {fmt((a_sum - b_sum) / n):>9}  {qs}")


if __name__ == "__main__":
    main()
