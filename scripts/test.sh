#!/usr/bin/env bash
# First contact, 2 of 2 (and what CI runs): install tune_batch with its test dependencies, then
# the whole test suite: every test but the timing-sensitive ones (marker `serial`) on
# TUNE_BATCH_TEST_WORKERS processes (pytest-xdist, 2 by default), then those alone. With
# arguments, one pytest run with those arguments instead, e.g.
# ./scripts/test.sh -m "not slow"
set -euo pipefail
cd "$(dirname "$0")/.."
# headless Chromium for the report.html browser test (Debian's package), where apt can install it
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) >/dev/null 2>&1 \
    || echo "warning: chromium could not be installed; the browser test will be skipped"
fi
# torch / torchvision: pip's constraint caps them at 2.14.1 / 0.29.1 (local wheels where present);
# TUNE_BATCH_INSTALLED=1 (CI's .ci/run, which has just run the same install): skipped (16 s)
if [ "${TUNE_BATCH_INSTALLED:-0}" != "1" ]; then
  python3 -m pip install -q -e ".[dev]"
fi
if [ "$#" -gt 0 ]; then
  exec python3 -m pytest "$@"
fi
status=0
python3 -m pytest -n "${TUNE_BATCH_TEST_WORKERS:-2}" --dist worksteal -m "not serial" || status=$?
# the serial tests: those of a file that starts Ray (marker `ray`) in a process per file, the others in
# one process: a process that starts and stops Ray twice can crash at exit after its tests passed
# (Ray's threads outliving a shutdown; seen once here, a segfault after "5 passed"), which would fail
# the run for no test's sake; each process start costs seconds
serial=$(grep -l "mark.serial" tests/test_*.py)
with_ray=$(grep -l "mark.ray" $serial || true)
without_ray=$(grep -L "mark.ray" $serial || true)
for group in $with_ray "$without_ray"; do
  [ -n "$group" ] || continue
  # shellcheck disable=SC2086  # a group is a list of files
  python3 -m pytest -m serial $group || { rc=$?; [ "$rc" -eq 5 ] || [ "$status" -ne 0 ] || status=$rc; }
done
exit "$status"
