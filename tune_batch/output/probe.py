"""The probe's full measurement report of one trial, as text (``pipeline.probe`` runs it)."""

from __future__ import annotations

from typing import Any

from tune_batch.config.metrics import is_evaluated
from tune_batch.store.records import Status, TrialResult


def _probe_window(res: TrialResult) -> str:
    m, info = res.metrics, res.info
    text = (f"timed window: {info.timed_steps} steps, {info.timed_samples} samples, {m.timed_s:.2f} s; "
            f"{info.warmup_steps} warm-up steps not timed")
    if info.window_extension_steps:
        text += (f"; {info.window_extension_steps} of the steps only lengthen the window to "
                 f"budget.min_window_s, the weights were restored after them")
    return text


def _probe_extras(res: TrialResult, trace_steps: int | None) -> list[str]:
    m, info = res.metrics, res.info
    lines = []
    if info.mfu_flag:
        lines.append(f"  warning           {info.mfu_flag}")
    if info.trace_dir and info.profile_step_s is not None:
        held = (f"{info.profile_active_steps} recorded in the trace, of {info.profiled_steps} run under the profiler "
                f"(wait and warm-up not recorded)" if info.profile_active_steps is not None
                and info.profile_active_steps != info.profiled_steps else f"{info.profiled_steps} profiled steps")
        lines.append(f"  trace             {info.trace_dir} ({held}, {info.profile_step_s * 1000:.2f} ms/step, "
                     f"{_overhead(res)})")
        lines += _trace_flag(res, trace_steps)
    elif info.profile:
        lines.append(f"  trace             {info.profile}")
    if m.energy_j_per_sample is not None:
        lines.insert(0, f"  energy            {m.energy_j_per_sample:.5f} J/sample   (NVML total-energy counter over "
                        f"the window; mean power {info.power_w or float('nan'):.0f} W)")
    return lines


def _overhead(res: TrialResult) -> str:
    """The profiler overhead, or why it is not a measurement: negative, or inside the window's
    own step-to-step noise (the 95 % half-width of samples/s)."""
    m, over = res.metrics, res.info.profiler_overhead
    noise = (m.samples_per_s_ci or 0.0) / m.samples_per_s if m.samples_per_s else 0.0
    if over is None:
        return "profiler overhead not measured"
    if over < 0:
        return (f"profiler overhead {over:+.1%}: UNVERIFIED, negative: the profiled steps ran faster than the "
                f"window, which is noise, not a speed-up")
    if over <= noise:
        return f"profiler overhead {over:+.1%}: UNVERIFIED, inside the window's own noise (+-{noise:.1%})"
    return f"profiler overhead {over:+.1%} (window noise +-{noise:.1%})"


def _trace_flag(res: TrialResult, found: int | None) -> list[str]:
    """A warning when the trace holds (``found``) another number of profiled steps than this
    trial recorded (e.g. an earlier probe's traces in the same directory), or none is readable."""
    info = res.info
    # every worker of a group profiles its own steps into the trial's trace directory
    wanted = info.profile_active_steps * (info.world_size or 1) if info.profile_active_steps is not None else None
    if found is None:
        return [f"  warning           no readable trace in {info.trace_dir}: the profiled steps are not shown there"]
    if wanted is not None and found != wanted:
        return [f"  warning           the trace holds {found} profiled step(s), this trial recorded {wanted}: "
                f"it is not this trial's alone (earlier traces in that directory?)"]
    return []


def _evaluated(m: Any) -> dict[str, float]:
    """The metrics ``train.evaluate`` returned (val_* / eval_*) other than val_acc."""
    return {k: v for k, v in m.other.items() if is_evaluated(k) and isinstance(v, int | float)}


def render_probe(res: TrialResult, trace_steps: int | None = None) -> str:
    """The probe's full measurement report of one trial; ``trace_steps``: the profiled steps its
    trace files hold (``pipeline.probe.trace_steps``)."""
    lines = [f"trial {res.trial_id}: {res.status.value}" + (f" ({res.reason})" if res.reason else "")]
    if res.status is not Status.OK:
        return "\n".join(lines)
    m, info, nan = res.metrics, res.info, float("nan")
    util_how = info.device_util_method or ("CPU time / (wall x threads)" if info.device_util_raw is not None else "")
    lines += [
        f"  device            {info.device}",
        *([f"  workers           {info.world_size} (a worker group of Ray actors, started in "
           f"{info.group_start_s:.1f} s; samples/s and step time are the group's, the rest rank 0's)"]
          if (info.world_size or 1) > 1
          and info.group_start_s is not None else []),
        f"  samples_per_s     {m.samples_per_s:.1f}   ({_probe_window(res)})",
        f"  step_time_s       {(m.step_time_s or nan) * 1000:.2f} ms",
        f"  device_util       {m.device_util if m.device_util is not None else nan:.3f}   ({util_how})",
        *([f"  sm_active         {info.sm_active:.3f}   (share of SMs busy over the window, NVML GPM; "
           f"tensor pipes busy {info.tensor_active if info.tensor_active is not None else nan:.3f})"]
          if info.sm_active is not None else []),
        # a trainer's loop counts no FLOPs: not measured, and the warning below says why
        f"  mfu               {m.mfu:.3f}   ({(m.model_flops_per_s or nan) / 1e9:.1f} GFLOP/s of "
        f"{(info.model_flops_per_sample or nan) / 1e9:.4f} GFLOP/sample; "
        f"peak {(info.peak_flops_per_s or nan) / 1e9:.1f} GFLOP/s, {info.peak_source})" if m.mfu is not None else
        "  mfu               not measured",
        f"  peak_mem_bytes    {(m.peak_mem_bytes or nan) / 2**20:.1f} MiB ({info.peak_mem_method or ''})",
        *([f"  peak_mem_worst    {m.peak_mem_worst_bytes / 2**20:.1f} MiB (worst case: {info.peak_mem_worst_method})"]
          if m.peak_mem_worst_bytes is not None else []),
        f"  data_wait_frac    {m.data_wait_frac if m.data_wait_frac is not None else nan:.3f}",
        # the built-in accuracy, or what train.evaluate returned (a val_loss config printed "val_acc nan")
        *([f"  val_acc           {m.val_acc if m.val_acc is not None else nan:.4f}"]
          if m.val_acc is not None or not _evaluated(m) else []),
        *(f"  {k:<17} {v:.4g}" for k, v in _evaluated(m).items()),
        f"  bottleneck        {info.bottleneck}: {info.suggestion}",
    ]
    return "\n".join(lines + _probe_extras(res, trace_steps))
