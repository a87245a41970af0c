# All agents of one run together, from their debug join logs: blocks verified per half second
# (relay blocks in brackets). Usage: python3 all_agents.py DIR/*join*.log
import sys,re,datetime
from collections import Counter
allr=Counter(); allb=Counter(); t0s=[]
data=[]
for f in sys.argv[1:]:
    t0=None
    for line in open(f):
        m=re.match(r'(\S+)Z\s+\w+\s+(.*)',line)
        if not m: continue
        t=datetime.datetime.fromisoformat(m.group(1)).timestamp()
        if 'phase: pulling' in line and t0 is None: t0=t; t0s.append(t)
        mm=re.search(r'block verified block=(\d+) from=(\S+) secs=(\S+)',line)
        if mm: data.append((t,mm.group(2)=='relay'))
T0=min(t0s)
for t,r in data:
    s=int((t-T0)*2)
    allb[s]+=1
    if r: allr[s]+=1
last=max(allb)
print('per half-second: total blocks (relay blocks); line rate per agent 1.5/half-s, relay 1.5/half-s')
print(' '.join(f"{s/2:.1f}:{allb[s]}({allr[s]})" for s in range(last+1)))
print('agents start spread', round(max(t0s)-min(t0s),3))
