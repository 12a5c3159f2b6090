"""A confirmation run: one config trained at a longer budget, validated at even intervals; its
validation curve (samples, training seconds, val_acc, loss) is what time to target is read from.

Training seconds exclude the validations (they exist only to measure); everything else a user's
run would pay is in them: data loading, the steps, the optimizer. One worker.
"""

from __future__ import annotations

import math
import os
import socket
import time
from typing import Any

import torch

from tune_batch.config import Config
from tune_batch.store.records import Metrics, Params, Status, TrialInfo, TrialResult
from tune_batch.trial.evaluate import accuracy, chance_rate, check_batchnorm
from tune_batch.trial.gns import NoiseScale, noise_scale
from tune_batch.trial.loop import Recipe, Stepper, cycle, make_optimizer, precision_flags
from tune_batch.trial.run import boundary, gns_figures, with_accumulation
from tune_batch.trial.setup import Placement, apply_memory_cap, build_net, device_name, load_data, pick_device


def confirm_samples(config: Config, train_size: int) -> int:
    """Samples a confirmation run trains: ``confirm.train_samples``, ``confirm.epochs`` passes
    over the training set, or by default 4 x ``budget.train_samples``."""
    c = config.confirm
    if c.train_samples is not None:
        return c.train_samples
    if c.epochs is not None:
        return max(1, math.ceil(c.epochs * train_size))
    return 4 * config.budget.train_samples


def confirm_timeout_s(config: Config, samples: int | None = None) -> float:
    """``budget.trial_timeout_s`` scaled by how much longer a confirmation run trains than a
    trial (``samples`` unknown with ``confirm.epochs``: a generous bound, 100 x)."""
    if samples is None and config.confirm.epochs is None:
        samples = confirm_samples(config, 0)
    factor = 100.0 if samples is None else max(1.0, samples / config.budget.train_samples)
    return config.budget.trial_timeout_s * factor


def eval_steps(total: int, evaluations: int) -> list[int]:
    """The step counts after which to validate: ``evaluations`` of them, evenly spread, the last
    one at the end."""
    n = max(1, min(evaluations, total))
    return sorted({max(1, round(total * (i + 1) / n)) for i in range(n)})


# (validation curve, chance rate, steps, data description, noise scale at the end)
_Curve = tuple[list[list[float]], float | None, int, str, NoiseScale | None]


def _curve(config: Config, params: Params, device: torch.device, start: float,
           extra: dict[str, Any] | None, accumulation: int = 1) -> _Curve:
    ds, loader, _ = load_data(config, params, Placement(), device, extra)
    samples = confirm_samples(config, len(ds.train))  # type: ignore[arg-type]
    total = samples // params.batch_size
    deadline = start + confirm_timeout_s(config, samples)
    if total < 1:
        raise ValueError(f"a confirmation run of batch_size {params.batch_size} gets no full step: raise "
                         f"confirm.train_samples or confirm.epochs")
    model, net = build_net(config, device, 1, extra)
    opt = make_optimizer(config, net.parameters(), params.lr)
    stepper = Stepper(net, opt, cycle(loader), device, deadline, None, params.batch_size,
                      Recipe.of(config, accumulation))
    curve: list[list[float]] = []
    train_s, done = 0.0, 0
    for at in eval_steps(total, config.confirm.evaluations):
        t = time.perf_counter()
        while done < at:
            stepper.step()
            done += 1
        stepper.check_loss()  # syncs the device, so the seconds are the steps'
        train_s += time.perf_counter() - t
        check_batchnorm(model)
        acc = accuracy(model, ds.val, device, params.batch_size)
        curve.append([float(done * params.batch_size), train_s, acc, stepper.last_loss])
    # after the last validation and outside train_s, as in a trial: the curve never sees it
    gns = noise_scale(model, stepper.batches, lambda b: stepper.autocast_loss(b, model), config.budget.gns_batches)
    return curve, chance_rate(ds.val), done, ds.description, gns


def confirm_run(config: Config, params: Params | dict[str, Any], *, trial_id: int | str | None = None,
                confirm_of: int | str | None = None, extra: dict[str, Any] | None = None,
                threads: int | None = None) -> TrialResult:
    """Train ``params`` for the confirmation budget, validating ``confirm.evaluations`` times.
    Never raises for trial faults (``oom``, ``diverged``, ``failed`` records, as any trial)."""
    start = time.perf_counter()
    p = Params.of(params)
    base = TrialInfo(host=socket.gethostname(), pid=os.getpid(), confirm_of=confirm_of, seed=config.search.seed)
    device = pick_device()

    def work() -> TrialResult:
        with precision_flags(config.train.precision, device):
            def attempt(accumulation: int) -> _Curve:
                apply_memory_cap(config, device)
                return _curve(config, p, device, start, extra, accumulation)

            (curve, chance, steps, data, est), accumulation = with_accumulation(config, p.batch_size, 1, device,
                                                                                attempt)
        samples, train_s, acc, loss = curve[-1]
        sps = samples / train_s if train_s > 0 else None
        # the noise scale at the end of the longer run (confirm.search_noise_scale pools the short ones only)
        gns, eff, gns_info = gns_figures(config, p, est, train_s)
        metrics = Metrics(samples_per_s=sps, val_acc=acc, duration_s=time.perf_counter() - start,
                          grad_noise_scale=gns, goodput=sps * eff if sps is not None and eff is not None else None)
        info = base.with_(device=device_name(device, torch.get_num_threads()), data=data, curve=curve,
                          chance_acc=chance, steps=steps, train_samples_done=int(samples), train_s=train_s,
                          final_loss=loss, world_size=1, per_worker_batch=p.batch_size,
                          precision=config.train.precision, optimizer=config.optimizer.name,
                          accumulation_steps=accumulation, micro_batch_size=-(-p.batch_size // accumulation)
                          ).with_(**gns_info)
        return TrialResult(trial_id, p, Status.OK, None, metrics, metrics.duration_s or 0.0, info)

    return boundary(p, trial_id, threads, start, base, work)
