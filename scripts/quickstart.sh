#!/usr/bin/env bash
# First contact, 1 of 2: install tune_batch and run the quickstart search (offline, on a CPU:
# scikit-learn's digits, a small CNN; about 3 minutes on 2 cores: 169-181 s measured). Extra arguments go to the
# search, e.g. ./scripts/quickstart.sh --output OUT --set search.seed=1
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e ".[dev]"
exec python3 -m tune_batch search configs/quickstart.yaml "$@"
