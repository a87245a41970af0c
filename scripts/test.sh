#!/usr/bin/env bash
# The test command: set-up (idempotent), the whole test suite (real servers, relays and agents over
# real sockets) over tcp, the core end-to-end suites again over each other transport (shm, UCX over
# its tcp, UCX over its shared memory: one suite, parameterized by FASTREPL_TEST_TRANSPORT), a
# check that the product binary holds no lab code and builds without UCX, a valgrind leak check of
# UCX pulls, a short run of every fuzz target where a nightly toolchain
# exists, and a one-line summary of the counts.
#   FASTREPL_TEST_RDMA=1  also run the tests that need an RDMA device (e2e_rdma and the lab's RDMA
#                         probe, ignored otherwise).
#   FUZZ_SECONDS=N        seconds per fuzz target (default 15).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
FASTREPL_TEST_TRANSPORT=tcp cargo test --workspace --release 2>&1 | tee -a "$log" || status=1
core=(--test e2e_fidelity --test e2e_sync --test e2e_compat --test e2e_faults)
for t in shm ucx-tcp ucx-sm; do
  echo "=== core end-to-end suites over $t"
  FASTREPL_TEST_TRANSPORT=$t cargo test --release -p cli "${core[@]}" 2>&1 | tee -a "$log" || status=1
done
if [[ -n ${FASTREPL_TEST_RDMA:-} ]]; then
  echo "=== RDMA tests"
  cargo test --release -p cli --test e2e_rdma -- --ignored 2>&1 | tee -a "$log" || status=1
  cargo test --release -p fastrepl-lab --test e2e_probe -- --ignored 2>&1 | tee -a "$log" || status=1
fi
product=$(scripts/product_check.sh 2>&1) || status=1
echo "$product"
leak=$(scripts/leakcheck.sh 2>&1) || status=1
echo "$leak"
scripts/fuzz.sh "${FUZZ_SECONDS:-15}" || status=1
sum() { grep -E '^test result:' "$log" | grep -oE "[0-9]+ $1" | awk '{s+=$1} END {print s+0}'; }
leak_ok=$(grep -c ' ok$' <<<"$leak"$'\n'"$product" || true)
leak_failed=$(grep -c 'FAILED' <<<"$leak"$'\n'"$product" || true)
echo "summary: $(( $(sum passed) + leak_ok )) passed, $(( $(sum failed) + leak_failed )) failed, $(sum ignored) skipped"
exit $status
