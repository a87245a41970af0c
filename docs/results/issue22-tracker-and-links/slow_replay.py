# How often an agent's chooser had a peer marked "slow", replayed from join logs kept at debug
# (each block's source and seconds): with the mean of the peers' moving-average rates as the
# yardstick (before commit b2c3bd2) and with the median (lower middle). A peer is slow below a
# quarter of the yardstick (swarm::SLOW_FRACTION); peers with fewer than two samples are not rated.
# python3 slow_replay.py BLOCK_BYTES JOIN_LOGS...
import re, sys
block = int(sys.argv[1])
for f in sys.argv[2:]:
    rates, n, samples = {}, {}, []
    for line in open(f):
        m = re.search(r'block verified block=\d+ from=(\d\S+) secs=(\S+)', line)
        if not m: continue
        p, s = m.group(1), block / max(float(m.group(2)), 1e-6)
        rates[p] = s if p not in rates else 0.5 * rates[p] + 0.5 * s
        n[p] = n.get(p, 0) + 1
        rated = sorted(rates[q] for q in rates if n[q] >= 2)
        if len(rated) < 2: continue
        mean, median = sum(rated) / len(rated), rated[(len(rated) - 1) // 2]
        slow = lambda y: sum(1 for q in rates if n[q] >= 2 and rates[q] < 0.25 * y)
        samples.append((slow(mean), slow(median)))
    k = max(1, len(samples))
    print(f'{f.rsplit("-", 1)[-1][:-4]:>3}: blocks from peers {len(samples)}; a peer slow after '
          f'{100 * sum(1 for a, _ in samples if a) / k:4.1f} % of them by the mean, '
          f'{100 * sum(1 for _, b in samples if b) / k:4.1f} % by the median')
