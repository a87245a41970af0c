#!/usr/bin/env bash
# The test command: set-up (idempotent), the whole test suite (real servers, relays and agents over
# real sockets) over tcp, the core end-to-end suites again over each other transport (shm, UCX over
# its tcp, UCX over its shared memory: one suite, parameterized by FASTREPL_TEST_TRANSPORT), a
# check that the product binary holds no lab code and builds without UCX, the lints as a gate
# (rustfmt --check, clippy -D warnings: scripts/lint.sh), a valgrind leak check of
# UCX pulls, a short run of every fuzz target where a nightly toolchain
# exists, and a one-line summary of the counts.
#   FASTREPL_TEST_RDMA=1  also run the tests that need an RDMA device (e2e_rdma and the lab's RDMA
#                         probe, ignored otherwise).
#   FUZZ_SECONDS=N        seconds per fuzz target (default 15).
#
# The summary counts honestly. libtest cannot mark a test ignored at run time, so a test that cannot
# run here (no root for namespaces, no systemd-analyze...) calls `fixtures::skip(reason)` and returns;
# libtest counts it passed. The helper appends `FASTREPL-SKIPPED <test>: <reason>` to the file named
# by FASTREPL_SKIP_LOG, set below: a file, because libtest captures (and drops) the output of passing
# tests, so a marker on stdout/stderr would be lost without --nocapture. Each marker moves one test
# from passed to skipped. Every fuzz target's run counts as one passed, failed (a crash) or skipped
# (no nightly). FASTREPL_TEST_UNAVAILABLE=netns,systemd-analyze forces those tests' skip path, to
# check this accounting on a machine that has everything.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
log=$(mktemp)
fuzzlog=$(mktemp)
export FASTREPL_SKIP_LOG=$(mktemp)
trap 'rm -f "$log" "$fuzzlog" "$FASTREPL_SKIP_LOG"' EXIT
status=0
# --no-fail-fast: a failing test binary must not keep the others from running (and from the count).
FASTREPL_TEST_TRANSPORT=tcp cargo test --workspace --release --no-fail-fast 2>&1 | tee -a "$log" || status=1
core=(--test e2e_fidelity --test e2e_sync --test e2e_compat --test e2e_faults)
for t in shm ucx-tcp ucx-sm; do
  echo "=== core end-to-end suites over $t"
  FASTREPL_TEST_TRANSPORT=$t cargo test --release --no-fail-fast -p cli "${core[@]}" 2>&1 | tee -a "$log" || status=1
done
if [[ -n ${FASTREPL_TEST_RDMA:-} ]]; then
  echo "=== RDMA tests"
  cargo test --release -p cli --test e2e_rdma -- --ignored 2>&1 | tee -a "$log" || status=1
  cargo test --release -p fastrepl-lab --test e2e_probe -- --ignored 2>&1 | tee -a "$log" || status=1
fi
product=$(scripts/product_check.sh 2>&1) || status=1
echo "$product"
lint=$(scripts/lint.sh 2>&1) || status=1
echo "$lint"
product+=$'\n'"$lint"
leak=$(scripts/leakcheck.sh 2>&1) || status=1
echo "$leak"
scripts/fuzz.sh "${FUZZ_SECONDS:-15}" 2>&1 | tee "$fuzzlog" || status=1
sum() { grep -E '^test result:' "$log" | grep -oE "[0-9]+ $1" | awk '{s+=$1} END {print s+0}'; }
count() { grep -cE "$1" "$2" || true; }
leak_ok=$(grep -c ' ok$' <<<"$leak"$'\n'"$product" || true)
leak_failed=$(grep -c 'FAILED' <<<"$leak"$'\n'"$product" || true)
skips=$(count '^FASTREPL-SKIPPED ' "$FASTREPL_SKIP_LOG")
if (( skips > 0 )); then echo "=== skipped here (counted as skipped, not passed)"; cat "$FASTREPL_SKIP_LOG"; fi
fuzz_ok=$(count '^\[fuzz\] [a-z_]+ ok$' "$fuzzlog")
fuzz_failed=$(count '^\[fuzz\] [a-z_]+ FAILED' "$fuzzlog")
fuzz_skipped=$(count '^\[fuzz\] [a-z_]+ skipped' "$fuzzlog")
passed=$(( $(sum passed) - skips + leak_ok + fuzz_ok ))
failed=$(( $(sum failed) + leak_failed + fuzz_failed ))
skipped=$(( $(sum ignored) + skips + fuzz_skipped ))
echo "summary: $passed passed, $failed failed, $skipped skipped"
(( failed == 0 )) || status=1
exit $status
