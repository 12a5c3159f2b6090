"""One trial, end to end: set up, train (warm-up, timed window, profiled steps), evaluate,
combine the ranks of a data-parallel group, and build the record.

:func:`measure` runs on every worker and raises on any fault (so a data-parallel group stops
at once); :func:`run_trial` is the one-worker boundary that turns faults into records.
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from tune_batch.analysis.noise import rate_ci
from tune_batch.config import Config
from tune_batch.measure.cpu import PeakRss
from tune_batch.measure.oom import is_oom_error
from tune_batch.store.records import Metrics, Params, Status, TrialInfo, TrialResult
from tune_batch.trial import collective, derive
from tune_batch.trial.evaluate import chance_rate, check_batchnorm, evaluate
from tune_batch.trial.faults import classify
from tune_batch.trial.gns import NoiseScale, efficiency, noise_scale
from tune_batch.trial.loop import Recipe, Stepper, cycle, make_optimizer, precision_flags, prime, release_memory
from tune_batch.trial.setup import (
    MemoryCap,
    Placement,
    StepPlan,
    apply_memory_cap,
    build_net,
    device_name,
    load_data,
    pick_device,
    plan_steps,
    trace_dir_of,
)
from tune_batch.trial.window import Window, profile_steps, timed_window, warm_up
from tune_batch.trial.worst import WorstCase, probe
from tune_batch.workload import batches

T = TypeVar("T")


@dataclass(frozen=True)
class _Trained:
    """What one worker's training left to report (before the ranks are combined)."""

    window: Window
    peak_bytes: float
    peak_method: str | None
    val_acc: float | None
    scores: dict[str, float]  # the other metrics of train.evaluate
    chance_acc: float | None
    final_loss: float
    short_batches: int
    profile_step_s: float | None
    gns: NoiseScale | None
    data: str
    sample_shape: tuple[int, ...]
    accumulation: int = 1
    first_step_s: float | None = None
    flops_batch: Any = None  # two real samples, to count the FLOPs of a user's train.step
    worst: WorstCase | None = None  # the largest batch and a validation batch (data.worst_case)
    sample_dtype: torch.dtype | None = None  # of the model's input (token ids: an integer dtype)


def _peak(window: Window, step_peak: int | None, mem: PeakRss | None) -> tuple[float, str | None]:
    if window.cuda_peak_bytes is not None:
        return float(window.cuda_peak_bytes), "torch.cuda.max_memory_allocated"
    if step_peak is not None:
        return float(step_peak), "torch memory profiler, last warm-up step (tensor bytes)"
    assert mem is not None  # no warm-up step to profile: the resident-memory high-water mark
    return float(mem.peak_bytes), f"RSS high-water mark above the pre-model baseline ({mem.method})"


def _train(config: Config, params: Params, plan: StepPlan, placement: Placement, device: torch.device,
           cap: MemoryCap, deadline: float, extra: dict[str, Any] | None, trace_dir: Path | None,
           validate: bool, accumulation: int = 1) -> _Trained:
    ds, loader, sampler = load_data(config, params, placement, device, extra)
    batch = params.batch_size // placement.world
    if device.type == "cpu":
        prime(config, ds.train, device, extra)
    # the CPU peak (and cap) comes from the profiled last warm-up step; sampling RSS every step
    # (a /proc read on the hot path, and a second, noisier cap check) only when there is none
    mem_ctx: Any = PeakRss(cap.bytes) if device.type == "cpu" and plan.warmup == 0 else contextlib.nullcontext()
    with mem_ctx as mem:
        model, net = build_net(config, device, placement.world, extra)
        opt = make_optimizer(config, net.parameters(), params.lr)
        stepper = Stepper(net, opt, cycle(loader, sampler), device, deadline, mem, batch,
                          Recipe.of(config, accumulation))
        step_peak = warm_up(stepper, plan.warmup, cap.bytes)
        window = timed_window(stepper, model, plan.timed, config, placement.world)
        peak, method = _peak(window, step_peak, mem)
        check_batchnorm(model)
        # the model as exactly train_samples of training left it is evaluated before anything
        # that exists only to measure can touch it (the window's extra steps were undone already)
        scores = evaluate(config, model, ds.val, device, batch) if validate and placement.rank == 0 else {}
        val_acc = scores.pop("val_acc", None)
        chance = chance_rate(ds.val) if val_acc is not None else None
        final_loss, short = stepper.last_loss, stepper.short_batches
        prof_s = profile_steps(stepper, config, trace_dir) if plan.profiled and trace_dir is not None else None
        # the bare model (no all-reduce): rank 0's own batches, like its validation
        gns = (noise_scale(model, stepper.batches, lambda b: stepper.autocast_loss(b, model),
                           config.budget.gns_batches)
               if validate and placement.rank == 0 else None)
        worst = probe(config, stepper, model, ds, batch, cap.bytes)  # last: the model it steps is measured no more
    shape, dtype = _input_spec(ds.train[0])
    return _Trained(window, peak, method, val_acc, scores, chance, final_loss, short, prof_s, gns, ds.description,
                    shape, accumulation, stepper.first_step_s,
                    next(iter(batches.loader(ds.train, 2))) if config.train.step else None, worst, dtype)


def _combine(t: _Trained, util: float | None,
             world: int) -> tuple[float, float, float, float | None, int, float | None]:
    """The group's figures: the slowest rank's window, the largest peak (and worst case), the mean
    wait and utilization, the sum of short batches (a worker alone: its own)."""
    w = t.window
    worst = max(t.peak_bytes, t.worst.peak_bytes) if t.worst is not None else -1.0
    window_s, peak, wait_s, worst = collective.all_reduce([w.seconds, t.peak_bytes, w.wait_s, worst],
                                                          ["max", "max", "mean", "max"], world)
    short = int(collective.all_reduce([float(t.short_batches)], ["sum"], world)[0])
    if util is not None:
        util = collective.all_reduce([float(util)], ["mean"], world)[0]
    return window_s, peak, wait_s, util, short, (worst if worst >= 0 else None)


def _utilization(t: _Trained, device: torch.device) -> tuple[float | None, dict[str, Any]]:
    """device_util and the telemetry kept beside it (CPU: the raw busy share; CUDA: NVML)."""
    w = t.window
    if device.type != "cuda":
        return w.cpu.util, {"device_util_raw": w.cpu.util_raw}
    if w.gpu is None:  # NVML could not be opened
        return None, {"nvml_samples": 0, "device_util_note": w.gpu_note}
    return w.gpu.device_util, dict(w.gpu.telemetry())


def gns_figures(config: Config, params: Params, est: NoiseScale | None,
         train_s: float) -> tuple[float | None, float | None, dict[str, Any]]:
    """(B_simple, the batch's statistical efficiency against the space's smallest batch, info).
    Signal not above noise in the sampled batches: B_noise beyond measure, efficiency 1 (the
    large-noise limit); noise not measurable: B_noise 0, efficiency base / batch."""
    if est is None:
        return None, None, {"gns_note": "not estimated (budget.gns_batches = 0, or batches of 1)"}
    base = min(config.space.batch_choices())
    info = {"gns_batches": est.batches, "gns_small_batch": est.small_batch, "gns_grad_sq": est.grad_sq,
            "gns_trace_sigma": est.trace_sigma, "gns_s": est.seconds,
            "gns_cost_frac": est.seconds / train_s if train_s > 0 else None}
    if est.b_simple is not None:
        if est.lower_bound:
            info.update(gns_lower_bound=True, gns_note=f"gradient signal not clearly above its noise in {est.batches} "
                        "batches: grad_noise_scale is its 95 % lower bound (the efficiency a conservative one)")
        return est.b_simple, efficiency(est.b_simple, params.batch_size, base), info
    if est.grad_sq <= 0:
        return None, 1.0, {**info, "gns_note": "gradient signal not above its noise in these batches: B_noise "
                                               "beyond measure, efficiency 1"}
    return None, base / params.batch_size, {**info, "gns_note": "no gradient noise measured: B_noise 0"}


def _record(config: Config, params: Params, plan: StepPlan, placement: Placement, device: torch.device,
            t: _Trained, cap: MemoryCap, extra: dict[str, Any] | None, trace_dir: Path | None,
            start: float) -> TrialResult:
    """The ``ok`` record of a worker's training, with the group's combined figures."""
    world = placement.world
    util, telemetry = _utilization(t, device)
    window_s, peak, wait_s, util, short, worst = _combine(t, util, world)
    steps = t.window.steps
    samples = steps * params.batch_size
    sps, step_s = samples / window_s, window_s / steps
    threads = torch.get_num_threads()
    mfu = derive.mfu(config, extra, t.sample_shape, device, threads, world, sps,
                     trace_dir.parent.parent if trace_dir is not None else None, t.flops_batch, t.sample_dtype)
    wait_frac = min(1.0, wait_s / window_s)
    verdict = derive.bottleneck(wait_frac, util, step_s, device.type, config.data.num_workers)
    energy = telemetry.get("energy_j") if device.type == "cuda" else None
    gns, eff, gns_info = gns_figures(config, params, t.gns, step_s * plan.total)
    metrics = Metrics(grad_noise_scale=gns, goodput=sps * eff if eff is not None else None, samples_per_s=sps,
                      samples_per_s_ci=rate_ci(t.window.blocks, sps), device_util=util, val_acc=t.val_acc, mfu=mfu.mfu,
                      model_flops_per_s=mfu.model_flops_per_s, peak_mem_bytes=peak, peak_mem_worst_bytes=worst,
                      data_wait_frac=wait_frac,
                      timed_s=window_s, step_time_s=step_s,
                      energy_j_per_sample=energy / samples if energy is not None else None,
                      duration_s=time.perf_counter() - start, other=dict(t.scores))
    info = TrialInfo(
        host=socket.gethostname(), pid=os.getpid(), device=device_name(device, threads), data=t.data,
        seed=config.search.seed, chance_acc=t.chance_acc, others_cpu_frac=t.window.cpu.others_cpu_frac,
        steal_frac=t.window.cpu.steal_frac,
        disturbed=t.window.cpu.disturbed or bool(telemetry.get("other_gpu_processes")),
        world_size=world, per_worker_batch=params.batch_size // world,
        nodes=sorted(set(collective.all_gather(socket.gethostname(), world))),
        node_ids=sorted(set(collective.all_gather(placement.node, world))),
        steps=plan.total, warmup_steps=plan.warmup, timed_steps=steps, timed_samples=samples,
        profiled_steps=plan.profiled, train_samples_done=plan.total * params.batch_size,
        window_extension_steps=t.window.extension_steps or None, short_batches=short, final_loss=t.final_loss,
        memory_cap_bytes=cap.bytes, memory_cap=cap.note, peak_mem_method=t.peak_method, **memory_info(t, cap),
        trace_dir=str(trace_dir) if t.profile_step_s is not None else None, profile_step_s=t.profile_step_s,
        profile_active_steps=config.profile.active * config.profile.repeat if t.profile_step_s is not None else None,
        profiler_overhead=t.profile_step_s / step_s - 1.0 if t.profile_step_s is not None else None,
        model_flops_per_sample=mfu.model_flops_per_sample,
        peak_flops_per_s=mfu.peak_flops_per_s, peak_source=mfu.peak_source, mfu_flag=mfu.flag,
        bottleneck=verdict[0], suggestion=verdict[1], statistical_efficiency=eff,
        precision=config.train.precision, optimizer=config.optimizer.name, accumulation_steps=t.accumulation,
        compile_s=max(0.0, t.first_step_s - step_s) if config.train.compile and t.first_step_s is not None else None,
        micro_batch_size=-(-(params.batch_size // world) // t.accumulation),
    ).with_(**telemetry, **gns_info)
    return TrialResult(None, params, Status.OK, None, metrics, metrics.duration_s or 0.0, info)


def memory_info(t: _Trained, cap: MemoryCap) -> dict[str, Any]:
    """The record's memory limit, the device's memory and others' on it, and the worst case's readings."""
    w = t.worst
    return {"memory_limit_bytes": cap.limit_bytes, "device_memory_bytes": cap.device_total_bytes,
            "other_gpu_mem_start_bytes": cap.others_bytes, "peak_mem_reserved_bytes": t.window.cuda_reserved_bytes,
            "peak_mem_worst_method": w.how if w is not None else None,
            "peak_mem_worst_allocated_bytes": int(w.allocated_bytes) if w and w.allocated_bytes is not None else None,
            "worst_case_s": w.seconds if w is not None else None}


def _input_spec(sample: Any) -> tuple[tuple[int, ...], torch.dtype | None]:
    """Shape and dtype of the model's input in one sample: its first item (a tuple or list), its
    first value (a dict), or itself; ``((), None)`` when that is no tensor."""
    first = (sample[0] if isinstance(sample, list | tuple)
             else next(iter(sample.values())) if isinstance(sample, dict) else sample)
    return (tuple(first.shape), first.dtype) if isinstance(first, torch.Tensor) else ((), None)


def accumulations(config: Config, per_worker: int, world: int) -> list[int]:
    """The micro-batch counts to try in order: ``train.accumulation``, or with "auto" (one
    worker) 1, 2, 4, ... while a micro-batch keeps at least one sample."""
    a = config.train.accumulation
    if a != "auto":
        return [min(int(a), per_worker)]
    if world > 1:  # every rank must take the same decision: a group does not retry
        return [1]
    out, n = [], 1
    while n <= per_worker:
        out.append(n)
        n *= 2
    return out


def with_accumulation(config: Config, per_worker: int, world: int, device: torch.device,
                      attempt: Callable[[int], T]) -> tuple[T, int]:
    """``attempt(accumulation)`` from the trial's seed for each micro-batch count of
    :func:`accumulations`, until one does not run out of memory; (its result, that count).
    Anything else, and the last attempt's out of memory, is raised."""
    tries = accumulations(config, per_worker, world)
    for i, accumulation in enumerate(tries):
        torch.manual_seed(config.search.seed)
        try:
            return attempt(accumulation), accumulation
        except Exception as e:
            if i + 1 == len(tries) or not is_oom_error(e):
                raise
            release_memory(device)
    raise AssertionError("accumulations() is never empty")


def boundary(p: Params, trial_id: int | str | None, threads: int | None, start: float, base: TrialInfo,
             work: Callable[[], TrialResult]) -> TrialResult:
    """The one-worker trial boundary: ``work()`` with ``threads`` torch threads (put back
    after); any fault becomes a record (out of memory ``oom``, non-finite ``diverged``, else
    ``failed`` with its reason and traceback); the device's memory is released afterwards, and
    the caller's torch random state is as it was (the trial seeds its own: ``torch.manual_seed``)."""
    prev_threads = torch.get_num_threads()
    device = pick_device()
    try:
        if threads:
            torch.set_num_threads(threads)
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            return work()
    except Exception as e:  # the trial boundary: every fault becomes a record
        status, reason, trace = classify(e)
        info = base.with_(device=device_name(device, torch.get_num_threads()))
        return TrialResult(trial_id, p, status, reason, duration_s=time.perf_counter() - start, info=info,
                           traceback=trace)
    finally:
        torch.set_num_threads(prev_threads)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0, device)
            torch.cuda.empty_cache()


def measure(config: Config, params: Params, placement: Placement = Placement(), *, extra: dict[str, Any] | None = None,
            run_dir: str | Path | None = None, trial_id: Any = None, validate: bool = True,
            start: float | None = None) -> TrialResult:
    """Train and measure ``params`` on this worker (every rank of a data-parallel group runs
    it); returns the ``ok`` record, with the group's figures. Raises on any fault. With
    ``train.accumulation: auto``, a batch that runs out of memory is trained again from the start
    in twice as many micro-batches."""
    start = time.perf_counter() if start is None else start
    if config.train.loop != "tune_batch":  # the user's trainer is measured by trial.trainers (a group's too)
        raise ValueError(f"train.loop = {config.train.loop}: measured by trial.trainers.measure_trainer")
    deadline = start + config.budget.trial_timeout_s
    device = pick_device()
    trace_dir = trace_dir_of(run_dir, trial_id)
    plan = plan_steps(config, params, profiling=trace_dir is not None)
    def attempt(accumulation: int) -> tuple[_Trained, MemoryCap]:
        cap = apply_memory_cap(config, device)
        return _train(config, params, plan, placement, device, cap, deadline, extra, trace_dir, validate,
                      accumulation), cap

    with precision_flags(config.train.precision, device):
        (trained, cap), _ = with_accumulation(config, params.batch_size // placement.world, placement.world, device,
                                              attempt)
        return _record(config, params, plan, placement, device, trained, cap, extra, trace_dir, start).replace(
            trial_id=trial_id)


def run_trial(config: Config, params: Params | dict[str, Any], *, trial_id: int | str | None = None,
              extra: dict[str, Any] | None = None, threads: int | None = None, run_dir: str | Path | None = None,
              validate: bool = True, node_id: str | None = None) -> TrialResult:
    """Run one measured one-worker trial of ``params`` (batch_size, lr, num_gpus) under ``config``.

    Never raises for trial faults: out of memory ends as ``oom``, everything else as ``failed``
    with the reason (and the traceback where it helps). ``threads``: torch intra-op threads for
    this trial (restored afterwards). ``run_dir``: where profiler traces go
    (``traces/<trial_id>``). ``validate=False`` leaves out the validation pass (memory probes).
    Whether to run at all is the policy's decision (``policy.Policy.skip``), made before.
    """
    start = time.perf_counter()
    p = Params.of(params)
    base = TrialInfo(host=socket.gethostname(), pid=os.getpid())
    if p.num_gpus > 1:
        return TrialResult(trial_id, p, Status.FAILED, "num_gpus > 1 runs on a worker group: use the ray backend",
                           duration_s=0.0, info=base)
    if config.train.loop != "tune_batch":  # the user's own trainer, measured by a callback (trial/trainers/)
        from tune_batch.trial.trainers import measure_trainer

        return boundary(p, trial_id, threads, start, base.with_(loop=config.train.loop), lambda: measure_trainer(
            config, p, start=start, validate=validate).replace(trial_id=trial_id))
    return boundary(p, trial_id, threads, start, base, lambda: measure(
        config, p, Placement(threads=threads, node_id=node_id), extra=extra, run_dir=run_dir, trial_id=trial_id,
        validate=validate, start=start))
