#!/usr/bin/env python3
"""runs.jsonl of warm.sh -> one line per log size: medians of the warm and the fresh join, their
ratio, and the rate at which the replica replayed the log (the caught-up phase over the log bytes)."""
import json, statistics, sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = defaultdict(lambda: defaultdict(list))
for r in rows:
    by[r["log_mib_written"]][r["mode"]].append(r)
med = statistics.median
print("log written | log at join (MiB) | warm s | fresh s | warm/fresh | replay s | replay MiB/s | rdb MiB | runs")
for l in sorted(by):
    w, f = by[l]["warm"], by[l]["fresh"]
    ok = lambda rs: [r for r in rs if r["join"].get("ok")]
    w, f = ok(w), ok(f)
    if not w or not f:
        print(f"{l} | failed runs: warm {len(by[l]['warm']) - len(w)}, fresh {len(by[l]['fresh']) - len(f)}")
        continue
    logb = med([r["join"].get("log_bytes", 0) for r in w]) / 2**20
    ws, fs = med([r["wall_secs"] for r in w]), med([r["wall_secs"] for r in f])
    ph = lambda r, k: r["join"]["phases"].get(k) or 0
    replay = med([ph(r, "caught_up") - ph(r, "loaded") for r in w])
    rdb = med([r["join"].get("rdb_length_bytes", 0) for r in w]) / 2**20
    rate = logb / replay if replay > 0 else float("nan")
    print(f"{l} | {logb:.0f} | {ws:.1f} | {fs:.1f} | {ws / fs:.2f} | {replay:.1f} | {rate:.0f} | {rdb:.0f} | {len(w)}+{len(f)}")
