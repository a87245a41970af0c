#!/usr/bin/env bash
# The product apart from the lab: `fastrepl` (crate cli) must not contain fixtures or lab code, and must
# compile without UCX (`--no-default-features`: tcp and shm only, for hosts without libucx-dev). Prints one
# line per check: "product: <name> ok|FAILED".
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fail=0
lab=$(cargo tree -p cli -e normal --prefix none 2>&1 | grep -E '^(fixtures|fastrepl-lab|plotters) ' | sort -u)
if [[ -z $lab ]]; then
  echo "product: no lab code in fastrepl ok"
else
  echo "product: no lab code in fastrepl FAILED"; echo "$lab"; fail=1
fi
ucx=$(cargo tree -p cli -e normal --no-default-features --prefix none 2>&1 | grep -E '^ucx' | sort -u)
# `cargo check`: it compiles everything a build would (no UCX crate may be in the tree at all), without
# linking a second fastrepl that would replace the UCX-enabled one the rest of the suite uses.
if [[ -z $ucx ]] && out=$(cargo check --release --quiet -p cli --no-default-features 2>&1); then
  echo "product: builds without UCX ok"
else
  echo "product: builds without UCX FAILED"; echo "$ucx"; echo "${out:-}"; fail=1
fi
exit $fail
