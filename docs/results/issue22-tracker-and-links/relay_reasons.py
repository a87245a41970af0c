# Why the tracker left asked blocks unanswered, from a relay log kept at debug
# (FASTREPL_BENCH_RELAY_LOG=debug FASTREPL_BENCH_KEEP_LOGS=DIR): python3 relay_reasons.py DIR/*relay.log
# Replays the relay's view: who holds what ("member holds a block") and the last load each member
# reported ("member's upload load"), then classifies every asked block that got no answer.
import re, sys, collections
holders = collections.defaultdict(set); load = {}
reasons = collections.Counter(); answered = 0; idle = 0
for line in open(sys.argv[1]):
    if 'member holds a block' in line:
        m = re.search(r'id=(\d+) block=(\d+)', line); holders[int(m.group(2))].add(int(m.group(1)))
    elif "member's upload load" in line:
        m = re.search(r'id=(\d+) uploads=(\d+)', line); load[int(m.group(1))] = int(m.group(2))
    elif 'locate answered' in line:
        m = re.search(r'id=(\d+) open=\[([^\]]*)\] flows_free=(\d+) peer_slots=(\d+) relay_slots=(\d+) asked=\[([^\]]*)\] answer=\[(.*)\]\s*$', line)
        a = int(m.group(1)); opn = {int(x) for x in m.group(2).split(',') if x.strip()}
        flows_free, peer_slots = int(m.group(3)), int(m.group(4))
        asked = [int(x) for x in m.group(6).split(',') if x.strip()]
        got = {int(b): w for b, w in re.findall(r'"(\d+):([^"]*)"', m.group(7))}
        peers_named = sum(1 for w in got.values() if w != 'R')
        for b in asked:
            if b in got: answered += 1; continue
            hs = holders[b] - {a}
            if not hs: reasons['no other holder, and no relay claim for this asker now'] += 1; continue
            if peers_named >= peer_slots + 2: reasons['the answer already named as many blocks as the asker can take'] += 1; continue
            if any(load.get(h, 0) == 0 for h in hs): idle += 1
            if flows_free == 0 and not (hs & opn): reasons['the asker reads from two peers already, and no holder is one of them'] += 1
            elif all(load.get(h, 0) >= 2 for h in hs): reasons['every holder reported serving its two uploads'] += 1
            else: reasons['a holder with room as reported, but counted full (askers sent there within 250 ms)'] += 1
unanswered = sum(reasons.values())
print(f'asked blocks answered: {answered}; left unanswered: {unanswered}')
for k, v in reasons.most_common(): print(f'{v:7d}  {100*v/unanswered:5.1f} %  {k}')
print(f'unanswered although a holder had reported serving nobody: {idle} ({100*idle/max(1,unanswered):.1f} %)')
