#!/bin/bash
# every 0.5 s: backlog bytes of every tbf in the lab's namespaces
while true; do
  t=$(date +%s.%N)
  for ns in $(ip netns list | awk '{print $1}' | grep '^frl'); do
    ip netns exec $ns tc -s qdisc show 2>/dev/null | awk -v ns=$ns -v t=$t '/qdisc tbf/{dev=$5} /backlog/{print t, ns, dev, $2}'
  done
  sleep 0.5
done
