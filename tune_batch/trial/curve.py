"""A confirmation run: one config trained at a longer budget, validated at even intervals; its
validation curve (samples, training seconds, the target metric's value: val_acc or what
``train.evaluate`` returns under ``confirm.metric``, loss) is what time to target is read from.

Training seconds exclude the validations and the memory watch's reads (they exist only to
measure); everything else a user's run would pay is in them: data loading, the steps, the
optimizer. Its memory is watched over every step and validation (``trial.watch``): the peak per
quarter, and the growth of what the run keeps between steps. One worker (``confirm_run``),
or every rank of a data-parallel group (``confirm_measure`` with its ``Placement``: the group's
backend launches it, rank 0 validates and returns the record).
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tune_batch.config import Config
from tune_batch.config.metrics import reached
from tune_batch.errors import TrialConfigError
from tune_batch.measure.memory import kept_reading_at, kept_scope
from tune_batch.store.records import Metrics, Params, Status, TrialInfo, TrialResult
from tune_batch.trial import collective
from tune_batch.trial.evaluate import accuracy, chance_rate, check_batchnorm, evaluate
from tune_batch.trial.gns import NoiseScale, noise_scale
from tune_batch.trial.loop import Recipe, Stepper, cycle, make_optimizer, precision_flags
from tune_batch.trial.run import boundary, gns_figures, with_accumulation
from tune_batch.trial.setup import (
    MemoryCap,
    Placement,
    apply_memory_cap,
    build_net,
    device_name,
    load_data,
    pick_device,
)
from tune_batch.trial.watch import Peekable, RunMemory, RunWatch
from tune_batch.trial.worst import WorstCase, probe


def confirm_timeout_s(config: Config, samples: int | None = None) -> float:
    """``budget.trial_timeout_s`` scaled by how much longer a confirmation run trains than a
    trial (``samples`` unknown with ``confirm.epochs``: a generous bound, 100 x)."""
    if samples is None:
        samples = config.confirm_samples(None)
    factor = 100.0 if samples is None else max(1.0, samples / config.budget.train_samples)
    return config.budget.trial_timeout_s * factor


def eval_steps(total: int, evaluations: int) -> list[int]:
    """The step counts after which to validate: ``evaluations`` of them, evenly spread, the last
    one at the end."""
    n = max(1, min(evaluations, total))
    return sorted({max(1, round(total * (i + 1) / n)) for i in range(n)})


@dataclass(frozen=True)
class _Run:
    """What a confirmation run's training leaves: its validation curve, the chance rate, steps,
    the data's description, the noise scale at the end, its memory and its worst case."""

    curve: list[list[float]]
    start: float  # the metric before the first step (nan on ranks that do not validate)
    chance: float | None
    steps: int
    data: str
    gns: NoiseScale | None
    memory: RunMemory
    worst: WorstCase | None
    total: int  # the steps the run was to train (more than ``steps``: ``until`` ended it)


def _curve(config: Config, params: Params, device: torch.device, start: float, extra: dict[str, Any] | None,
           cap: MemoryCap, accumulation: int = 1, placement: Placement = Placement(),
           until: Callable[[float], bool] | None = None) -> _Run:
    ds, loader, sampler = load_data(config, params, placement, device, extra)
    samples = config.confirm_samples(len(ds.train))  # type: ignore[arg-type]
    total = samples // params.batch_size
    deadline = start + confirm_timeout_s(config, samples)
    if total < 1:
        raise ValueError(f"a confirmation run of batch_size {params.batch_size} gets no full step: raise "
                         f"confirm.train_samples or confirm.epochs")
    model, net = build_net(config, device, placement.world, extra)
    opt = make_optimizer(config, net.parameters(), params.lr)
    batches = Peekable(cycle(loader, sampler))
    stepper = Stepper(net, opt, batches, device, deadline, None, params.batch_size // placement.world,
                      Recipe.of(config, accumulation))
    watch = RunWatch(device, total, cap.bytes)
    lead = placement.rank == 0  # validates (the other ranks wait for it in their next step's all-reduce)
    curve: list[list[float]] = []
    train_s, done = 0.0, 0
    evals = eval_steps(total, config.confirm.evaluations)
    # where the run starts from, outside train_s: the untrained model's value (what "the way from
    # the start to the level" of a loss can be measured from, whatever the validations' spacing)
    rng = torch.get_rng_state()  # iterating a loader draws a seed: the run's randomness stays as without it
    start_value = _validate(config, model, ds.val, device, params.batch_size // placement.world) if lead else math.nan
    torch.set_rng_state(rng)
    for i, at in enumerate(evals):
        t, before = time.perf_counter(), done
        while done < at:
            done += 1
            watch.step(stepper, batches, done)
        stepper.check_loss()  # syncs the device, so the seconds are the steps'
        train_s += watch.train_seconds(time.perf_counter() - t, done - before)
        check_batchnorm(model)
        acc = _validate(config, model, ds.val, device, params.batch_size // placement.world) if lead else math.nan
        if kept_reading_at(i, len(evals)):
            watch.keep(done)
        curve.append([float(done * params.batch_size), train_s, acc, stepper.last_loss])
        # rank 0 validates; every rank of a group ends at the same step (one more collective)
        if until is not None and collective.group_max(1.0 if lead and until(acc) else 0.0, placement.world) > 0:
            break
    # after the last validation and outside train_s, as in a trial: the curve never sees it (the
    # bare model, rank 0's own batches: no collective)
    gns = (noise_scale(model, stepper.batches, lambda b: stepper.autocast_loss(b, model), config.budget.gns_batches)
           if lead else None)
    worst = probe(config, stepper, model, ds, params.batch_size // placement.world, cap.bytes)
    memory = watch.result(worst.eval_bytes if worst is not None else None)
    return _Run(curve, start_value, chance_rate(ds.val), done, ds.description, gns, memory, worst, total)


def _memory_record(run: _Run, cap: MemoryCap, world: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metrics, info) of a run's memory: its peak over every step and validation, the worst case
    (its reserved peak on CUDA), the peaks per quarter, the memory kept along the run and its
    growth; a group's peaks are its largest worker's."""
    m, w = run.memory, run.worst
    worst = (max(x for x in (m.peak_bytes, m.reserved_bytes, w.peak_bytes, w.train_step_bytes) if x is not None)
             if w is not None else None)
    peak, worst = collective.all_reduce([m.peak_bytes or -1.0, worst if worst is not None else -1.0], ["max", "max"],
                                        world)
    info = {"memory_cap_bytes": cap.bytes, "memory_cap": cap.note, "memory_limit_bytes": cap.limit_bytes,
            "device_memory_bytes": cap.device_total_bytes, "other_gpu_mem_start_bytes": cap.others_bytes,
            "peak_mem_method": m.method, "memory_quarters_bytes": m.quarters_bytes, "memory_kept_bytes": m.kept,
            "memory_growth": m.growth.to_dict(), "peak_mem_worst_method": w.how if w is not None else None,
            "worst_case_s": w.seconds if w is not None else None}
    return {"peak_mem_bytes": peak if peak >= 0 else None, "peak_mem_worst_bytes": worst if worst >= 0 else None}, info


def _validate(config: Config, model: torch.nn.Module, val: Any, device: torch.device, batch: int) -> float:
    """The value of the confirmation's metric (``Config.confirm_metric``) on ``val``: the built-in
    accuracy, or what ``train.evaluate`` returns under that name (TrialConfigError when it has none)."""
    if config.train.evaluate is None:
        return accuracy(model, val, device, batch)
    name = (config.confirm_metric or ("val_acc", "maximize"))[0]
    scores = evaluate(config, model, val, device, batch)
    if name not in scores:
        raise TrialConfigError(f"train.evaluate returned {sorted(scores)}: no {name!r} to read time to target on "
                               f"(confirm.metric)")
    return scores[name]


def stop_at_target(config: Config) -> Callable[[float], bool] | None:
    """The test a confirmation run ends at (``confirm.stop_at_target``): the first validation that
    reaches the given target (``goal.target``, else ``confirm.target``) in the metric's direction;
    None without a given target (the default one is set from the runs' own curves) or with the
    option off."""
    target, metric = config.given_target, config.confirm_metric
    if target is None or not config.confirm.stop_at_target or metric is None:
        return None
    return lambda v: math.isfinite(v) and reached(v, target, metric[1] == "maximize")


def confirm_run(config: Config, params: Params | dict[str, Any], *, trial_id: int | str | None = None,
                confirm_of: int | str | None = None, extra: dict[str, Any] | None = None,
                threads: int | None = None, until: Callable[[float], bool] | None = None) -> TrialResult:
    """Train ``params`` for the confirmation budget, validating ``confirm.evaluations`` times.
    Never raises for trial faults (``oom``, ``diverged``, ``failed`` records, as any trial).

    ``until``: called with each validation's value; the run ends at the first one it is true for
    (for a caller that reads only the time to a target: the curve up to there is the one the
    whole run would have), in tune_batch's own loop and in a trainer's. Default:
    ``stop_at_target``'s (a worker group's runs take it in ``confirm_measure``)."""
    start = time.perf_counter()
    p = Params.of(params)
    base = TrialInfo(host=socket.gethostname(), pid=os.getpid(), confirm_of=confirm_of, seed=config.search.seed)
    if until is None and p.num_gpus == 1:
        until = stop_at_target(config)
    if p.num_gpus > 1:
        return TrialResult(trial_id, p, Status.FAILED, "num_gpus > 1 is confirmed on a worker group: use the ray "
                           "backend", duration_s=0.0, info=base)
    if config.train.loop != "tune_batch":  # in the user's own trainer, with its own evaluation (trial/trainers/)
        from tune_batch.trial.trainers.curve import confirm_trainer

        return boundary(p, trial_id, threads, start, base.with_(loop=config.train.loop), lambda: confirm_trainer(
            config, p, confirm_timeout_s(config), confirm_of=confirm_of, start=start, until=until).replace(
            trial_id=trial_id))
    return boundary(p, trial_id, threads, start, base, lambda: confirm_measure(
        config, p, Placement(threads=threads), confirm_of=confirm_of, extra=extra, start=start, until=until).replace(
        trial_id=trial_id))


def confirm_measure(config: Config, params: Params, placement: Placement = Placement(), *,
                    confirm_of: int | str | None = None, extra: dict[str, Any] | None = None,
                    start: float | None = None, until: Callable[[float], bool] | None = None) -> TrialResult:
    """A confirmation run on this worker (every rank of a data-parallel group runs it; rank 0's
    record is the run's: its curve, its validation). Raises on any fault. ``until``: as in
    ``confirm_run``; in a group rank 0 tests its validation and every rank ends with it."""
    start = time.perf_counter() if start is None else start
    p = params
    base = TrialInfo(host=socket.gethostname(), pid=os.getpid(), confirm_of=confirm_of, seed=config.search.seed)
    device = pick_device()
    world = placement.world

    with precision_flags(config.train.precision, device):
        def attempt(accumulation: int) -> tuple[_Run, MemoryCap]:
            cap = apply_memory_cap(config, device)
            with kept_scope():  # the memory watch's readings after the first see only what the run made
                return _curve(config, p, device, start, extra, cap, accumulation, placement, until), cap

        (run, cap), accumulation = with_accumulation(config, p.batch_size // world, world, device, attempt)
    samples, train_s, acc, loss = run.curve[-1]
    sps = samples / train_s if train_s > 0 else None
    # the noise scale at the end of the longer run (decide.predict.search_noise_scale pools the short ones only)
    gns, eff, gns_info = gns_figures(config, p, run.gns, train_s)
    mem_metrics, mem_info = _memory_record(run, cap, world)
    name = (config.confirm_metric or ("val_acc", "maximize"))[0]
    metrics = Metrics(samples_per_s=sps, val_acc=acc if name == "val_acc" else None,
                      other={} if name == "val_acc" else {name: acc}, duration_s=time.perf_counter() - start,
                      grad_noise_scale=gns, goodput=sps * eff if sps is not None and eff is not None else None,
                      **mem_metrics)
    info = base.with_(device=device_name(device, torch.get_num_threads()), data=run.data, curve=run.curve,
                      start_value=run.start if math.isfinite(run.start) else None, chance_acc=run.chance,
                      steps=run.steps, train_samples_done=int(samples), train_s=train_s,
                      planned_samples=run.total * p.batch_size, stopped_at_target=run.steps < run.total or None,
                      final_loss=loss, world_size=world, per_worker_batch=p.batch_size // world,
                      precision=config.train.precision, optimizer=config.optimizer.name,
                      accumulation_steps=accumulation,
                      micro_batch_size=-(-(p.batch_size // world) // accumulation), **mem_info).with_(**gns_info)
    return TrialResult(None, p, Status.OK, None, metrics, metrics.duration_s or 0.0, info)
