"""Summarise runs.jsonl (cgroup.sh): one line per run, then the medians and the store/memory ratio."""
import json, statistics, sys

rows = [json.loads(l) for l in open(sys.argv[1] if len(sys.argv) > 1 else "runs.jsonl")]
MiB = 2**20
for r in rows:
    j, s = r["join"], r["relay_status"]
    line = (f"{r['mode']:6} run {r['run']}: handoff {j.get('handoff')} rdb {j.get('rdb_length_bytes', 0) / 2**30:.2f} GiB "
            f"pull {j.get('pull_mib_s', 0):.0f} MiB/s; relay alive {r['relay_alive']}, "
            f"unreclaimable {s.get('memory_unreclaimable_bytes', 0) / MiB:.0f} MiB, bound {(s.get('memory_bound_bytes') or 0) / MiB:.0f} MiB, "
            f"resident {s.get('resident_memory_bytes', 0) / MiB:.0f} MiB")
    if r["cgroup_stat"]:
        st = r["cgroup_stat"]
        line += (f"; cgroup max usage {r['cgroup_max_usage_bytes'] / MiB:.0f} MiB (page cache included), "
                 f"rss+shmem at end {(st['rss'] + st['shmem']) / MiB:.0f} MiB, failcnt {r['cgroup_failcnt']}, oom kills {r['cgroup_oom_kills']}")
    print(line)
pulls = {m: [r["join"].get("pull_mib_s", 0) for r in rows if r["mode"] == m] for m in ("memory", "store")}
if all(pulls.values()):
    mem, sto = statistics.median(pulls["memory"]), statistics.median(pulls["store"])
    print(f"median pull: memory {mem:.0f} MiB/s, store in the cgroup {sto:.0f} MiB/s: store/memory {sto / mem:.3f} "
          f"(runs: {len(pulls['memory'])} + {len(pulls['store'])})")
