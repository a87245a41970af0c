#!/usr/bin/env bash
# The main job on an embedded default: set-up (idempotent), then `fastrepl-lab demo`: a local master with
# a few hundred MB of mixed data, a relay and two replicas joined at once and verified, next to native
# replication of the same master, with a summary table. Extra arguments go to `fastrepl-lab demo`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
exec target/release/fastrepl-lab demo "$@"
