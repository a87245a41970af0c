#!/usr/bin/env python3
"""Markdown tables for the README from `fastrepl bench` result directories.

The README's benchmark numbers are pasted from this script's output, so that every number there can be
traced to a committed results.json:

    python3 scripts/bench_tables.py docs/results/issue4-original-100mbit docs/results/issue4-original-1gbit-unshaped

Prints, per scenario: time to all in sync per mode (and the fastrepl-tcp / native-diskless ratio), the
phase split of single-replica runs, master and fastrepl resources, latency under load, and per-replica
times for staggered arrival. Failed runs print as FAILED.
"""
import json
import math
import sys


def f(x, nd=2):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{nd}f}"


def load(dirs):
    runs, specs = [], {}
    for d in dirs:
        doc = json.load(open(f"{d}/results.json"))
        for s in doc["scenarios"]:
            specs.setdefault(s["spec"]["name"], s["spec"])
            for r in s["runs"]:
                r["_dir"] = d
                runs.append(r)
    return runs, specs


def median_run(rs):
    """The run with the median time (the lower middle one for an even count)."""
    rs = sorted(rs, key=lambda r: r["secs"])
    return rs[(len(rs) - 1) // 2]


def times(runs, modes):
    """Time to all in sync per (link, N) and mode; with repeated runs, the median and the range."""
    keys = []
    for r in runs:
        k = (r["link"], r["replicas"])
        if k not in keys:
            keys.append(k)
    order = {"100mbit": 0, "1gbit": 1, "10gbit": 2, "unshaped": 3}
    keys.sort(key=lambda k: (order.get(k[0], 9), k[1]))
    out = ["| link | N | " + " | ".join(modes) + " | fastrepl-tcp ÷ native-diskless |", "|---|---|" + "---|" * len(modes) + "---|"]
    for link, n in keys:
        cell, sec = {}, {}
        for m in modes:
            rs = [r for r in runs if r["link"] == link and r["replicas"] == n and r["mode"] == m]
            ok = [r for r in rs if not r["error"]]
            if rs:
                sec[m] = median_run(ok)["secs"] if ok else None
                cell[m] = f(sec[m]) if ok else "FAILED"
                if len(rs) > 1:
                    cell[m] += f" ({len(ok)}/{len(rs)} runs, {f(min(r['secs'] for r in ok))}–{f(max(r['secs'] for r in ok))})" if ok else ""
        ratio = f(sec["fastrepl-tcp"] / sec["native-diskless"]) if sec.get("fastrepl-tcp") and sec.get("native-diskless") else "–"
        out.append(f"| {link} | {n} | " + " | ".join(cell.get(m, "–") for m in modes) + f" | {ratio} |")
    return "\n".join(out)


def phases(runs):
    """Single-replica runs: the master's RDB child and the replica's milestones, seconds from start."""
    out = [
        "| link | mode | in sync | master RDB child | RDB (s) | first byte | transfer done | loaded | in sync − RDB end |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    picked = []
    for r in runs:
        if r["replicas"] != 1 or r["error"]:
            continue
        same = [x for x in runs if x["replicas"] == 1 and not x["error"] and x["link"] == r["link"] and x["mode"] == r["mode"]]
        if median_run(same) is r:  # with repeated runs: the median one
            picked.append(r)
    for r in picked:
        ph = r["phases"][0] if r["phases"] else {}
        spans = r.get("master_rdb") or []
        span = " ".join(f"{f(a)}–{f(b)}" for a, b in spans) or "–"
        dur = f(sum((b - a) for a, b in spans if b is not None)) if spans else "–"
        ends = [b for _, b in spans if b is not None]
        after = f(r["secs"] - max(ends)) if ends else "–"
        first = ph.get("first_byte")
        if r["mode"] == "native-disk":
            transfer, loaded = ph.get("loading"), None
        elif r["mode"].startswith("native"):
            # diskless load: loads as it receives, and does not count master_sync_read_bytes
            first, transfer, loaded = ph.get("loading"), None, None
        else:
            transfer, loaded = ph.get("pulled"), ph.get("loaded")
        out.append(f"| {r['link']} | {r['mode']} | {f(r['secs'])} | {span} | {dur} | {f(first)} | {f(transfer)} | {f(loaded)} | {after} |")
    return "\n".join(out)


def resources(runs):
    out = [
        "| link | N | mode | master CPU (s) | forks | master host sent (MB) | relay CPU (s) | agents CPU (s) | peak RSS MB master/relay/agent/replica |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        if r["error"]:
            continue
        rss = r["peak_rss_kib"]
        mb = lambda k: f(rss.get(k) / 1024, 0) if rss.get(k) is not None else "–"
        sent = f(r["master_host_tx_bytes"] / 1e6, 0) if r.get("master_host_tx_bytes") is not None else "–"
        out.append(
            f"| {r['link']} | {r['replicas']} | {r['mode']} | {f(r['master_cpu_secs'])} | {r['forks']} | {sent} | "
            f"{f(r['relay_cpu_secs'])} | {f(r['agent_cpu_secs'])} | {mb('master')}/{mb('relay')}/{mb('agent_max')}/{mb('replica_max')} |"
        )
    return "\n".join(out)


def latency(runs):
    out = ["| link | mode | in sync (s) | GET/SET p50 ms | p99 ms | max ms | requests |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        if r["error"] or not r.get("latency_ms"):
            continue
        l = r["latency_ms"]
        out.append(f"| {r['link']} | {r['mode']} | {f(r['secs'])} | {f(l['p50'])} | {f(l['p99'])} | {f(l['max'])} | {l['count']} |")
    return "\n".join(out)


def staggered(runs):
    n = max(len(r["per_replica"]) for r in runs)
    out = [
        "| link | mode | forks | master CPU (s) | " + " | ".join(f"replica {i + 1} in sync at (s)" for i in range(n)) + " |",
        "|---|---|---|---|" + "---|" * n,
    ]
    for r in runs:
        if r["error"]:
            out.append(f"| {r['link']} | {r['mode']} | FAILED |")
            continue
        out.append(f"| {r['link']} | {r['mode']} | {r['forks']} | {f(r['master_cpu_secs'])} | " + " | ".join(f(t) for t in r["per_replica"]) + " |")
    return "\n".join(out)


def main(dirs):
    runs, specs = load(dirs)
    for name, spec in specs.items():
        rs = [r for r in runs if r["scenario"] == name]
        print(f"### {name}: {' '.join(sorted({r['_dir'] for r in rs}))}\n")
        if spec["arrival"] == "staggered":
            print(staggered(rs) + "\n")
            continue
        print(times(rs, spec["modes"]) + "\n")
        if any(r["replicas"] == 1 for r in rs):
            print(phases(rs) + "\n")
        if spec.get("latency_probe"):
            print(latency(rs) + "\n")
        print(resources(rs) + "\n")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
