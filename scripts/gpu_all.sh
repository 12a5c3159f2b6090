#!/usr/bin/env bash
# Every GPU-only check and figure of this project in one pass (about 8 minutes on one H200; gpu_check alone took 181 s there), for a
# machine with CUDA: scripts/gpu_check.py (NVML, OOM, MFU, a Ray search, interference), the
# precision benchmark (fp32 / tf32 / bf16 / fp16, ResNet-18 at 64 px), the fidelity benchmark
# and a short CLI search in bf16. Each part has its own time limit, so one that hangs leaves the
# others' output; everything lands in DIR (default ./gpu_out), one log per part.
#
# Usage: scripts/gpu_all.sh [DIR [RUNS]]   (RUNS: where the run directories go, default DIR)
set -uo pipefail
cd "$(dirname "$0")/.."
D="${1:-gpu_out}"
R="${2:-$D}"
mkdir -p "$D" "$R"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

part() {  # part NAME SECONDS CMD...: runs CMD under a time limit, its output to DIR/NAME.log
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$D/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0)) s (limit $limit s)"
  grep -E '^RESULT|"ok"|Recommended|recommend' "$D/$name.log" | tail -n 8
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
python3 -c "import torch, ray, optuna; print('torch', torch.__version__, 'ray', ray.__version__, 'optuna', optuna.__version__)"

part gpu_check 210 python3 scripts/gpu_check.py --json-out "$D/gpu_check.json" --out "$R/check_runs"
part precision 95 python3 scripts/bench_precision.py --batch-sizes 256 1024 --repeats 2 \
  --precisions fp32 tf32 bf16 fp16 --lr 0.05 --set model.name=resnet18 --set model.kwargs={} --set data.name=synthetic \
  --set data.resize=64 --set data.synthetic_samples=8192 --set budget.train_samples=8192
part fidelity 75 python3 scripts/bench_fidelity.py --repeats 3 --pairs 3 --batch-size 256
part search 120 python3 -m tune_batch search configs/quickstart.yaml --set budget.trials=6 \
  --set train.precision=bf16 --output "$R/search"
echo "== search summary"
tail -n 25 "$D/search.log"
cp "$R/search/pareto.json" "$D/search_pareto.json" 2>/dev/null || true
