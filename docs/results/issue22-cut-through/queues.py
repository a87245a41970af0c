"""Summarise qd.sh's samples (gunzip first): per host and direction, how often its tbf queue held
bytes, how much when it did (median), and that median in milliseconds at 100 Mbit/s.

    python3 queues.py runs/before-n8-queues/qdisc-backlog.log
"""
import collections, statistics, sys

rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) != 4:
        continue
    _, _, dev, b = p
    v = b[:-1]  # "123b", "45Kb", "1Mb"
    v = float(v[:-1]) * 1024 if v.endswith('K') else float(v[:-1]) * (1 << 20) if v.endswith('M') else float(v)
    host, rest = dev.split('x0')
    kind = 'sends' if rest.startswith('e') else 'receives'  # hN…e… host side, hN…p… switch side
    rows[(host, kind)].append(v)
for k in sorted(rows):
    vs = rows[k]
    nz = [v for v in vs if v > 0]
    med = statistics.median(nz) if nz else 0
    print(f"{k[0]} {k[1]:8}: {len(nz)}/{len(vs)} samples queued, median {med/1024:.0f} KiB ({med/12.5e3:.0f} ms), max {max(vs)/1024:.0f} KiB")
