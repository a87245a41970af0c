# Per agent, from join logs kept with FASTREPL_BENCH_JOIN_LOG=debug FASTREPL_BENCH_KEEP_LOGS=DIR:
# locates and the seconds waited for them, blocks per second (relay blocks in brackets), refusals.
# Usage: python3 per_agent.py DIR/*join*.log
import sys,re,datetime
for f in sys.argv[1:]:
    t0=None; rows=[]; loc=[]
    for line in open(f):
        m=re.match(r'(\S+)Z\s+\w+\s+(.*)',line)
        if not m: continue
        t=datetime.datetime.fromisoformat(m.group(1)).timestamp()
        if 'phase: pulling' in line: t0=t
        mm=re.search(r'block verified block=(\d+) from=(\S+) secs=(\S+)',line)
        if mm: rows.append((t,int(mm.group(1)),mm.group(2),float(mm.group(3))))
        mm=re.search(r'tracker answered a locate secs=(\S+)',line)
        if mm: loc.append(float(mm.group(1)))
        if 'peer busy' in line: rows.append((t,-1,'BUSY',0))
    print(f, 'pull start', t0, 'locates', len(loc), 'sum locate s', round(sum(loc),2), 'max', max(loc))
    # per-second blocks
    from collections import Counter
    c=Counter(); src=Counter()
    for t,b,s,secs in rows:
        if b>=0: c[int(t-t0)]+=1; src[(int(t-t0), 'relay' if s=='relay' else 'peer')]+=1
    last=max(int(t-t0) for t,_,_,_ in rows)
    print(' '.join(f"{s}:{c[s]}({src[(s,'relay')]}r)" for s in range(last+1)))
    print('last block at', round(rows[-1][0]-t0,2), 'busy', sum(1 for r in rows if r[1]==-1))
