"""Figures derived from what was measured: MFU against a peak, and the bottleneck verdict."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tune_batch.config import Config
from tune_batch.workload import build_model

_FLOPS_CACHE: dict[Any, tuple[float, bool]] = {}


@dataclass(frozen=True)
class Mfu:
    model_flops_per_sample: float
    model_flops_per_s: float
    mfu: float
    peak_flops_per_s: float
    peak_source: str
    flag: str | None


def _step_flops(config: Config, extra: dict[str, Any] | None, batch: Any) -> float:
    """FLOPs per sample of the user's ``train.step`` (forward + backward) on a real batch, on
    the CPU (any batch structure, any loss)."""
    from torch.utils.flop_counter import FlopCounterMode

    from tune_batch.trial.loop import batch_len
    from tune_batch.workload.resolve import resolve_callable

    fn = resolve_callable(config.train.step or "", "train.step")
    model = build_model(config.model, extra)
    counter = FlopCounterMode(display=False)
    with counter:
        fn(model, batch, torch.device("cpu")).float().backward()
    return counter.get_total_flops() / max(1, batch_len(batch))


def _flops_per_sample(config: Config, extra: dict[str, Any] | None, sample_shape: tuple[int, ...],
                      batch: Any = None, dtype: torch.dtype | None = None) -> tuple[float, bool]:
    """Model FLOPs per sample (forward + backward), counted once per model and input shape and
    dtype, and whether the model has convolutions. With ``train.step``, counted through it on ``batch``."""
    from tune_batch.measure.flops import model_flops_per_sample

    key = (config.model.model_dump_json(), sample_shape, dtype, repr(sorted((extra or {}).items())),
           config.train.step)
    if key not in _FLOPS_CACHE and config.train.step is not None:
        model = build_model(config.model, extra)
        _FLOPS_CACHE[key] = (_step_flops(config, extra, batch),
                             any(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules()))
    if key not in _FLOPS_CACHE:
        model = build_model(config.model, extra)
        has_conv = any(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules())
        try:  # on the meta device nothing is computed or allocated
            counted = model_flops_per_sample(model.to("meta"), sample_shape, "meta", dtype=dtype)
        except Exception:  # some ops have no meta kernel: count on the CPU instead
            counted = model_flops_per_sample(build_model(config.model, extra), sample_shape, "cpu", dtype=dtype)
        _FLOPS_CACHE[key] = (counted, has_conv)
    return _FLOPS_CACHE[key]


def mfu(config: Config, extra: dict[str, Any] | None, sample_shape: tuple[int, ...], device: torch.device,
        threads: int, world: int, samples_per_s: float, run_dir: Path | None, batch: Any = None,
        sample_dtype: torch.dtype | None = None) -> Mfu:
    """Model FLOPs per sample x samples_per_s / (the peak of ``world`` devices); the model's input
    is of ``sample_shape`` and ``sample_dtype`` (token ids: an integer dtype)."""
    from tune_batch.measure.flops import resolve_peak

    per_sample, has_conv = _flops_per_sample(config, extra, sample_shape, batch, sample_dtype)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x{threads} threads"
    # the peak of the precision the trial computed in (tf32: the flags are on while this runs)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.train.precision, torch.get_default_dtype())
    peak = resolve_peak(device, name, dtype, config_peak=config.resources.peak_flops,
                        cache_dir=run_dir, host=socket.gethostname(), has_conv=has_conv)
    value = per_sample * samples_per_s / (peak.flops_per_s * world)
    flag = None
    if value > 1.0:
        flag = (f"MFU {value:.2f} > 1: the peak ({peak.source}) is too low for this model's kernels; "
                f"set resources.peak_flops")
    return Mfu(per_sample, per_sample * samples_per_s, value, peak.flops_per_s, peak.source, flag)


def bottleneck(data_wait_frac: float, device_util: float | None, step_time_s: float, device_type: str,
               num_workers: int) -> tuple[str, str]:
    """Where the timed window went: input-bound, launch-bound (CUDA) or compute-bound, with a hint."""
    if data_wait_frac >= 0.2:
        hint = f"{data_wait_frac:.0%} of the window waited for data: raise data.num_workers (now {num_workers})"
        if device_type == "cuda":
            hint += ", keep pin_memory on, move decoding/augmentation off the critical path"
        return "input-bound", hint
    if device_type == "cuda" and device_util is not None and device_util < 0.6 and step_time_s < 0.02:
        return "launch-bound", ("short steps and an idle GPU between kernels: raise batch_size, or cut Python and "
                                "launch overhead (torch.compile, CUDA graphs)")
    return "compute-bound", "the device's arithmetic sets the pace: mixed precision or a larger batch raises throughput"
