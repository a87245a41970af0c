#!/bin/bash
# Every file of this directory, from the repository's root (about 40 min on this 2-core machine, the
# 1 000- and 10 000-agent rows most of it):  docs/results/issue33-ninth/simulate/sim.sh
# From this pass on the simulator models the agents' serve caches (--serve-cache-mib, 512 by default:
# blocks handed on are kept up to it, then dropped and the tracker told) and tells the tracker the
# snapshot's size. The rows:
#   now          this pass's agents: the window widened by the cache's unused room, the cache's own
#                choice of old blocks (swarm::Keep), the slow agent's copy of a dropped block
#   fixed        the same with the window as asked (--window-fixed)
#   newest       the same with caches that keep the newest (--cache-keeps-newest)
#   before       the eighth pass's agents in the new model (--window-fixed --cache-keeps-newest; the
#                tracker's new rule is in, and acts only on blocks dropped everywhere)
#   old-model    the eighth pass's model (--serve-cache-mib 0 --size-unknown --window-fixed: every
#                block kept for good, the size never told): its published rows
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
out=docs/results/issue33-ninth/simulate
cargo build --release -q -p fastrepl-lab
L=./target/release/fastrepl-lab
S="--link 100mbit --slow-fraction 0.05 --fail-fraction 0.01 --join-spread 30"
git rev-parse --short HEAD > $out/commit.txt
declare -A V=([now]="" [fixed]="--window-fixed" [newest]="--cache-keeps-newest" [before]="--window-fixed --cache-keeps-newest" [old-model]="--serve-cache-mib 0 --size-unknown --window-fixed")
for v in now fixed newest before old-model; do
  # The issue's fleet rows: 5 % slow hosts, 1 % failures, joins over 30 s, 1 GiB.
  $L simulate ${V[$v]} --agents 4,8,64 $S --seeds 20 --json $out/spread30-$v-seeds20.json > $out/spread30-$v-seeds20.md
done
for v in now before; do
  $L simulate ${V[$v]} --agents 1000 $S --seeds 6 --json $out/spread30-1000-$v-seeds6.json > $out/spread30-1000-$v-seeds6.md
  # Even fan-out, 256 MiB; the bench's uneven fleet (4 agents, one at 20 Mbit/s, 128 MiB).
  $L simulate ${V[$v]} --agents 1,2,4,8 --link 100mbit --mib 256 --seeds 20 > $out/even-$v-seeds20.md
  $L simulate ${V[$v]} --agents 1,4 --slow-hosts 1 --link 100mbit --mib 128 --seeds 100 --json $out/uneven-$v-seeds100.json > $out/uneven-$v-seeds100.md
done
$L simulate --agents 10000 $S > $out/spread30-10000-now.md
# The next lead (not a default): the same memory split otherwise, a window of 64 with a 384 MiB
# cache against 32 with 512 (about 7 min more).
$L simulate --window 64 --serve-cache-mib 384 --agents 4,8,64 $S --seeds 20 --json $out/spread30-w64-cache384-seeds20.json > $out/spread30-w64-cache384-seeds20.md
$L simulate --window 64 --serve-cache-mib 384 --agents 1000 $S --seeds 6 --json $out/spread30-1000-w64-cache384-seeds6.json > $out/spread30-1000-w64-cache384-seeds6.md
