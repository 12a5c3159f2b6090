"""GPU checks for a CUDA machine, in at most about 5 minutes: the paths this project cannot run
on a CPU-only machine. Prints one JSON object; exits 1 when a check fails, 2 without CUDA.

1. nvml:   NVML telemetry during a real trial (device_util in (0, 1], samples at >= 10 Hz, energy;
           also how device_util was taken, and GPM SM / tensor-pipe activity where the GPU has it)
2. oom:    a real CUDA out-of-memory under resources.device_memory, recorded as status oom
3. mfu:    MFU of a model that is large matmuls (builtin mlp), expected between 0.3 and 1
4. search: a 6-trial Ray Tune search on synthetic data ends with every trial recorded
5. interference: a second process running matmuls on the same GPU during a trial is seen by NVML
           (info.other_gpu_processes >= 1, info.disturbed); the same trial alone is not disturbed

Usage: python scripts/gpu_check.py [--out DIR] [--checks nvml oom mfu search interference]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


# a second process busy on the same GPU: large matmuls until killed; says "ready" once it runs
_HOG = """
import torch
a = torch.randn(8192, 8192, device="cuda")
(a @ a).sum().item()
print("ready", flush=True)
while True:
    a = (a @ a) / 8192.0
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="where the search run directory goes (default: a temp dir)")
    ap.add_argument("--json-out", default=None, help="also write the JSON object here, after every check")
    ap.add_argument("--checks", nargs="+", default=["nvml", "oom", "mfu", "search", "interference"])
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": "no CUDA device: run this on a GPU machine"}))
        return 2
    from tune_batch.config import config_from_dict
    from tune_batch.pipeline.search import search
    from tune_batch.trial import run_trial

    out: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "checks": {}}
    base = {"name": "gpucheck",
            "data": {"name": "synthetic", "resize": 32, "val_samples": 512, "synthetic_samples": 16384},
            "model": {"name": "resnet18"}, "budget": {"train_samples": 8192, "warmup_steps": 5, "trial_timeout_s": 120}}

    def check(name: str, fn) -> None:
        t0 = time.perf_counter()
        try:
            out["checks"][name] = {**fn(), "seconds": round(time.perf_counter() - t0, 1)}
        except Exception as e:  # a check that crashes is a failed check, reported with its traceback
            out["checks"][name] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                                   "traceback": traceback.format_exc()[-2000:]}
        if args.json_out:  # a check that hangs past the caller's timeout still leaves the earlier ones
            Path(args.json_out).write_text(json.dumps(out, indent=1, default=str))

    def nvml() -> dict:
        res = run_trial(config_from_dict(base), {"batch_size": 256, "lr": 0.05, "num_gpus": 1})
        m, info = res.metrics, res.info
        rate = (info.nvml_samples or 0) / max(m.timed_s or 1e9, 1e-9)
        ok = res.status == "ok" and 0 < (m.device_util if m.device_util is not None else -1) <= 1 and rate >= 10
        return {"ok": ok, "status": res.status, "reason": res.reason, "device_util": m.device_util,
                "nvml_samples": info.nvml_samples, "samples_per_hz": rate, "energy_j_per_sample": m.energy_j_per_sample,
                "samples_per_s": m.samples_per_s, "peak_mem_bytes": m.peak_mem_bytes, "mfu": m.mfu,
                "bottleneck": info.bottleneck, "device": info.device,
                "device_util_method": info.device_util_method, "device_util_polled": info.device_util_polled,
                "sm_active": info.sm_active, "tensor_active": info.tensor_active, "gpm": info.gpm,
                "timed_s": m.timed_s, "window_extension_steps": info.window_extension_steps,
                "peak_source": info.peak_source}

    def oom() -> dict:
        cfg = config_from_dict({**base, "data": {**base["data"], "resize": 224, "synthetic_samples": 2048},
                                "resources": {"device_memory": "2GiB"},
                                "budget": {**base["budget"], "train_samples": 2048}})
        res = run_trial(cfg, {"batch_size": 1024, "lr": 0.05, "num_gpus": 1})
        after = run_trial(config_from_dict(base), {"batch_size": 64, "lr": 0.05, "num_gpus": 1},)
        return {"ok": res.status == "oom" and after.status == "ok", "status": res.status, "reason": res.reason,
                "next_trial_after_oom": after.status}

    def mfu() -> dict:
        cfg = config_from_dict({**base, "model": {"name": "mlp", "kwargs": {"hidden": 8192, "depth": 3}},
                                "budget": {**base["budget"], "train_samples": 65536}})
        res = run_trial(cfg, {"batch_size": 4096, "lr": 0.01, "num_gpus": 1}, validate=False)
        m, info = res.metrics, res.info
        from tune_batch.measure.flops import measure_peak

        # the datasheet peak against what this GPU's own fp32 matmul and conv kernels reach
        measured, rates = measure_peak(torch.device("cuda", 0), torch.float32)
        return {"ok": res.status == "ok" and 0.3 <= (m.mfu or 0) <= 1.0, "status": res.status, "reason": res.reason,
                "mfu": m.mfu, "model_flops_per_s": m.model_flops_per_s, "peak": info.peak_flops_per_s,
                "peak_source": info.peak_source, "data_wait_frac": m.data_wait_frac,
                "samples_per_s": m.samples_per_s, "measured_fp32_peak": measured, "measured_rates": rates,
                "device_util": m.device_util, "sm_active": info.sm_active,
                "tensor_active": info.tensor_active, "device_util_method": info.device_util_method}

    def six_trials() -> dict:
        cfg = config_from_dict({**base, "budget": {**base["budget"], "trials": 6, "train_samples": 4096},
                                "space": {"batch_size": {"min": 32, "max": 512}, "lr": {"low": 0.001, "high": 0.1}}})
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(args.out or tmp) / "search"
            res = search(cfg, run, quiet=True)
            statuses = [r.status.value for r in res.records]
        return {"ok": len(statuses) == 6 and "ok" in statuses, "statuses": statuses, "front": len(res.front)}

    def interference() -> dict:
        import subprocess

        params = {"batch_size": 256, "lr": 0.05, "num_gpus": 1}
        alone = run_trial(config_from_dict(base), params, validate=False)
        hog = subprocess.Popen([sys.executable, "-c", _HOG], stdout=subprocess.PIPE, text=True)
        try:
            ready = hog.stdout.readline().strip() == "ready"  # it holds a CUDA context and is busy
            shared = run_trial(config_from_dict(base), params, validate=False)
        finally:
            hog.kill()
            hog.wait()
        a, b = alone.info, shared.info
        ok = (ready and alone.status == shared.status == "ok" and not a.other_gpu_processes
              and (b.other_gpu_processes or 0) >= 1 and bool(b.disturbed))
        return {"ok": ok, "hog_ready": ready,
                "alone": {"disturbed": a.disturbed, "other_gpu_processes": a.other_gpu_processes,
                          "samples_per_s": alone.metrics.samples_per_s, "note": a.other_gpu_note},
                "shared": {"disturbed": b.disturbed, "other_gpu_processes": b.other_gpu_processes,
                           "other_gpu_mem_bytes": b.other_gpu_mem_bytes, "samples_per_s": shared.metrics.samples_per_s,
                           "note": b.other_gpu_note}}

    checks = {"nvml": nvml, "oom": oom, "mfu": mfu, "search": six_trials, "interference": interference}
    for name in args.checks:
        check(name, checks[name])
    out["ok"] = all(c.get("ok") for c in out["checks"].values())
    print(json.dumps(out, indent=1, default=str))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
