#!/usr/bin/env bash
# First contact, 2 of 2 (and what CI runs): install tune_batch with its test dependencies, then
# the whole test suite (about 20 minutes on 2 cores). Extra arguments go to pytest, e.g.
# ./scripts/test.sh -m "not slow"
set -euo pipefail
cd "$(dirname "$0")/.."
# headless Chromium for the report.html browser test (Debian's package), where apt can install it
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) >/dev/null 2>&1 \
    || echo "warning: chromium could not be installed; the browser test will be skipped"
fi
# torch / torchvision: pip's constraint caps them at 2.14.1 / 0.29.1 (local wheels where present)
python3 -m pip install -q -e ".[dev]"
exec python3 -m pytest "$@"
