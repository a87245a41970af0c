# Per agent, from join logs kept at debug (FASTREPL_BENCH_JOIN_LOG=debug FASTREPL_BENCH_KEEP_LOGS=DIR):
# how many peer flows were busy on average over the pull (2 = both, always), the relay flow's
# share, and the rate of a peer flow while busy. A read's `secs` runs from when it was sent, or from
# when the read before it on the same connection arrived: summed, the time its connection had a read
# in flight. python3 flows.py BLOCK_BYTES DIR/*join-*.log
import sys, re, datetime
block = int(sys.argv[1])
for f in sys.argv[2:]:
    peer = rel = 0.0; n = 0; t0 = t1 = None
    for l in open(f):
        m = re.match(r'(\S+)Z', l)
        if not m: continue
        t = datetime.datetime.fromisoformat(m.group(1)).timestamp()
        if 'phase: pulling' in l and t0 is None: t0 = t
        mm = re.search(r'block verified block=\d+ from=(\S+) secs=(\S+)', l)
        if mm:
            t1 = t
            if mm.group(1) == 'relay': rel += float(mm.group(2))
            else: peer += float(mm.group(2)); n += 1
    d = t1 - t0
    print(f'{f.rsplit("-", 1)[-1][:-4]:>3}: pull {d:5.1f} s, peer flows busy {peer/d:4.2f} of 2, relay flow {rel/d:4.2f}, a busy peer flow {n*block/peer/1e6:4.1f} MB/s')
