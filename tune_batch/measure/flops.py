"""Model FLOPs and the devices' peak FLOP/s, for MFU.

``model_flops_per_sample``: counted with ``torch.utils.flop_counter.FlopCounterMode`` over one
forward and backward pass (a matmul of m x k x n counts 2mkn).

Peak FLOP/s, in order: ``resources.peak_flops`` when the config sets it (an explicit figure
wins: a power-capped or partitioned GPU is slower than its datasheet), the datasheet figure of a
known GPU (dense, no sparsity; not for MIG slices, which have a fraction of the SMs), or a figure
measured once per machine and dtype (cached in the run directory). On CUDA, fp32 work that torch
lets run as TF32 is held against the TF32 peak (see ``compute_dtype_name``).
The measured peak takes the best of several runs over several sizes of the kernels models
spend their time in: matmul and 3x3 convolution, forward and backward. Convolution libraries
can execute fewer operations than the nominal count (Winograd, FFT), so a model can still
exceed a measured peak: an MFU above 1 is flagged, never clipped. Each kernel's sizes go up
until one call takes ``SLOW_CALL_S``: a dtype the device has no fast path for (bfloat16 on a CPU
without AVX-512 BF16: one 2048 matmul took 67 s on a 2-core AMD EPYC with AVX2) is measured in
seconds, not minutes, and its one slow call is its reading.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# dense peak FLOP/s per GPU by name fragment and dtype (vendor datasheets, no sparsity)
DATASHEET: list[tuple[str, dict[str, float]]] = [
    ("H200", {"float32": 67e12, "tf32": 494.5e12, "bfloat16": 989.5e12, "float16": 989.5e12}),
    ("H100 SXM", {"float32": 67e12, "tf32": 494.5e12, "bfloat16": 989.5e12, "float16": 989.5e12}),
    ("H100 PCIe", {"float32": 51e12, "tf32": 378e12, "bfloat16": 756e12, "float16": 756e12}),
    ("H100", {"float32": 67e12, "tf32": 494.5e12, "bfloat16": 989.5e12, "float16": 989.5e12}),
    ("A100", {"float32": 19.5e12, "tf32": 156e12, "bfloat16": 312e12, "float16": 312e12}),
    ("L40S", {"float32": 91.6e12, "tf32": 183e12, "bfloat16": 362e12, "float16": 362e12}),
    ("A10G", {"float32": 31.2e12, "tf32": 62.5e12, "bfloat16": 125e12, "float16": 125e12}),
    ("V100", {"float32": 15.7e12, "float16": 125e12}),
    ("T4", {"float32": 8.1e12, "float16": 65e12}),
]


_MEASURED: dict[str, Peak] = {}  # per process: measure once


@dataclass(frozen=True)
class Peak:
    flops_per_s: float
    source: str  # "datasheet: ..." | "measured: ..." | "config"


def model_flops_per_sample(model: Any, sample_shape: tuple[int, ...], device: Any, batch: int = 2,
                           dtype: Any = None) -> float:
    """FLOPs of one training sample (forward + backward), counted on a batch of ``batch`` inputs
    of the sample's shape and dtype: random values for floating point, zeros for integers (token
    ids: index 0 exists in any embedding)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    dtype = dtype or torch.get_default_dtype()
    if dtype.is_floating_point or dtype.is_complex:
        x = torch.randn(batch, *sample_shape, device=device, dtype=dtype)
    else:
        x = torch.zeros(batch, *sample_shape, device=device, dtype=dtype)
    counter = FlopCounterMode(display=False)
    try:
        with counter:
            out = model(x)
            out.float().sum().backward()
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return counter.get_total_flops() / batch


def datasheet_peak(device_name: str, dtype: str) -> Peak | None:
    for fragment, table in DATASHEET:
        if fragment.lower() in device_name.lower() and dtype in table:
            return Peak(table[dtype], f"datasheet: {fragment} {dtype} dense")
    return None


SLOW_CALL_S = 0.5  # a kernel call this long is read once, and its larger sizes are not run


def _best_rate(fn: Callable[[], None], flops: float, sync: Callable[[], None], repeats: int = 3,
               min_s: float = 0.05) -> tuple[float, float]:
    """(best FLOP/s over ``repeats`` timings of at least ``min_s``, seconds of the first call).
    A first call of ``SLOW_CALL_S`` or more is the reading: repeating it would cost minutes."""
    t0 = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - t0
    if first >= SLOW_CALL_S:
        return flops / first, first
    best = 0.0
    for _ in range(repeats):
        n = 0
        t0 = time.perf_counter()
        while True:
            fn()
            n += 1
            sync()
            dt = time.perf_counter() - t0
            if dt >= min_s:
                break
        best = max(best, flops * n / dt)
    return best, first


def measure_peak(device: Any, dtype: Any, threads: int | None = None) -> tuple[float, dict[str, float]]:
    """Best FLOP/s over matmuls and 3x3 convolutions (forward and backward) of several sizes, each
    kernel's sizes in increasing order until one call takes ``SLOW_CALL_S``. Returns the peak and
    each measured kernel's best, for the record."""
    import torch
    import torch.nn.functional as F

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    rates: dict[str, float] = {}
    big = device.type == "cuda"
    for n in ((2048, 4096, 8192) if big else (512, 1024, 2048)):
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        rates[f"matmul {n}"], first = _best_rate(lambda a=a, b=b: torch.mm(a, b), 2.0 * n**3, sync)
        if first >= SLOW_CALL_S:
            break
    for (bs, c, hw) in (((64, 256, 56), (128, 128, 28)) if big else ((16, 64, 32), (32, 128, 16))):
        x = torch.randn(bs, c, hw, hw, device=device, dtype=dtype, requires_grad=True)
        w = torch.randn(c, c, 3, 3, device=device, dtype=dtype, requires_grad=True)
        fwd = 2.0 * bs * c * c * 9 * hw * hw

        def conv_fb(x: Any = x, w: Any = w) -> None:
            F.conv2d(x, w, padding=1).sum().backward()

        rates[f"conv3x3 {bs}x{c}x{hw}x{hw} fwd+bwd"], first = _best_rate(conv_fb, 3.0 * fwd, sync)
        if first >= SLOW_CALL_S:
            break
    return max(rates.values()), rates


def compute_dtype_name(device: Any, dtype: Any, has_conv: bool = False) -> str:
    """The precision the tensor cores run at: fp32 work on CUDA runs as TF32 where torch allows
    it, for matmuls (``torch.backends.cuda.matmul.allow_tf32``, off by default) and for cuDNN
    convolutions (``torch.backends.cudnn.allow_tf32``, on by default). Measured on an H200:
    fp32 matmul 51 TFLOP/s, fp32 conv3x3 fwd+bwd 193 TFLOP/s, above the 67 fp32 datasheet peak."""
    import torch

    name = str(dtype).replace("torch.", "")
    if device.type == "cuda" and dtype == torch.float32 and (
            torch.backends.cuda.matmul.allow_tf32 or (has_conv and torch.backends.cudnn.allow_tf32)):
        return "tf32"
    return name


def resolve_peak(device: Any, device_name: str, dtype: Any, *, config_peak: float | None, cache_dir: Path | None,
                 host: str, has_conv: bool = False) -> Peak:
    """The peak FLOP/s of one device for MFU (see the module docstring for the order).
    ``has_conv``: the model has convolutions (cuDNN may run them as TF32)."""
    import torch

    dtype_name = compute_dtype_name(device, dtype, has_conv)
    if config_peak:
        return Peak(float(config_peak), "config: resources.peak_flops")
    if device.type == "cuda" and "mig" not in device_name.lower():
        sheet = datasheet_peak(device_name, dtype_name)
        if sheet is not None:
            return sheet
    key = f"{host}|{device_name}|{dtype_name}|{torch.get_num_threads() if device.type == 'cpu' else ''}"
    if key in _MEASURED:
        return _MEASURED[key]
    cache = cache_dir / "peak_flops.json" if cache_dir is not None else None
    if cache is not None and cache.exists():
        try:
            entry = json.loads(cache.read_text()).get(key)
            if entry:
                _MEASURED[key] = Peak(entry["flops_per_s"], entry["source"])
                return _MEASURED[key]
        except (OSError, ValueError):
            pass
    peak, rates = measure_peak(device, dtype)
    best = max(rates, key=rates.get)  # type: ignore[arg-type]
    result = Peak(peak, f"measured: best of matmul and conv3x3 fwd+bwd in {dtype_name} on {device_name} ({best})")
    _MEASURED[key] = result
    if cache is not None:
        try:
            data = json.loads(cache.read_text()) if cache.exists() else {}
            data[key] = {**asdict(result), "kernels": rates}
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=1))
            tmp.replace(cache)
        except OSError:
            pass
    return result
