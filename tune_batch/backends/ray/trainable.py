"""The Tune function of one trial: the policy's verdict, then the measurement (here for one
worker, on a worker group of Ray actors for several), then one report to Tune."""

from __future__ import annotations

import json
from typing import Any

import ray
from ray import tune

from tune_batch.analysis import objectives
from tune_batch.backends.ray.resources import ResourcePlan
from tune_batch.backends.ray.watchdog import hang_grace_s, run_with_watchdog
from tune_batch.config import Config, config_from_dict
from tune_batch.config.callables import install
from tune_batch.measure.memory import settle_process_heap
from tune_batch.store.jobs import lengthened, seeded
from tune_batch.store.records import Params, Status, TrialInfo, TrialResult
from tune_batch.study.admission import skipped
from tune_batch.trial.faults import TrialTimeout

#: Keys the searcher adds to a trial's config beside the params: the Optuna trial number and
#: the policy's skip verdict (made on the driver, before the trial is started).
CONTROL_KEYS = ("trial_number", "skip_reason", "seed", "repeat_of", "confirm_of", "confirm_samples", "rung")


def report_payload(config: Config, result: TrialResult) -> dict[str, Any]:
    """What a trial reports to Tune: every objective (sentinels unless ok), the constraints,
    the status and the whole record."""
    payload: dict[str, Any] = dict(zip(config.metric_names, objectives.values(config, result)))
    payload.update({f"constraint_{k}": v for k, v in objectives.constraints(result).items()})
    payload["tb_status"] = result.status.value
    payload["tb_record"] = json.dumps(result.to_record(), default=str)
    return payload


def _one_worker(config: Config, params: Params, trial_id: Any, run_dir: str,
                confirm_of: Any = None) -> tuple[TrialResult, bool]:
    from tune_batch.trial import run_trial
    from tune_batch.trial.curve import confirm_run, confirm_timeout_s

    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    threads = int(cpus) if cpus else None
    node = str(ray.get_runtime_context().get_node_id())
    grace = hang_grace_s()
    limit = config.budget.trial_timeout_s + grace
    if confirm_of is not None:  # a confirmation run: the longer budget, validated along the way
        limit = confirm_timeout_s(config) + grace
        def work() -> TrialResult:
            return confirm_run(config, params, trial_id=trial_id, confirm_of=confirm_of, threads=threads)
    else:
        def work() -> TrialResult:
            return run_trial(config, params, trial_id=trial_id, threads=threads, run_dir=run_dir, node_id=node)
    outcome = run_with_watchdog(work, limit, f"tune_batch-trial-{trial_id}")
    if outcome.hung:
        reason = (f"timeout: still running {limit:g} s after it started (budget.trial_timeout_s + {grace:g} s "
                  f"grace); its process was stopped")
        return TrialResult(trial_id, params, Status.FAILED, reason, duration_s=limit,
                           info=TrialInfo(node_ids=[], watchdog=True)), True
    if outcome.error is not None:
        raise outcome.error
    assert outcome.value is not None
    return outcome.value, False


def ray_trainable(spec: dict[str, Any], *, config_dict: dict[str, Any], run_dir: str, plan: ResourcePlan,
                  callables: dict[str, Any] | None = None) -> None:
    """Measure one trial and report it. A one-worker trial that hangs reports its record first,
    then raises, so Ray discards this process and with it what hangs (a worker group that hangs
    is ended by ``run_data_parallel`` itself)."""
    install(callables)  # Python callables the driver's config names (notebooks)
    settle_process_heap()  # this process runs trials only: the collection after each walks what it made
    config = config_from_dict(config_dict)
    if spec.get("seed") is not None:  # a repeat of a searched config with another seed
        config = seeded(config, int(spec["seed"]))
    config = lengthened(config, spec.get("confirm_samples"))  # an escalation round's length
    trial_id, reason = spec.get("trial_number"), spec.get("skip_reason")
    params = Params.of({k: v for k, v in spec.items() if k not in CONTROL_KEYS})
    hung = False
    if reason:
        result = skipped(params, trial_id, reason)
    elif not plan.fits(params.num_gpus):  # the baseline's GPU count (the searched ones were filtered)
        of = spec.get("confirm_of")
        result = TrialResult(trial_id, params, Status.FAILED, f"num_gpus = {params.num_gpus} cannot run here: the "
                             f"cluster has {plan.what()} (a worker group would wait for them forever)",
                             info=TrialInfo(confirm_of=of, seed=config.search.seed if of is not None else None))
    elif params.num_gpus > 1:
        from tune_batch.backends.ray.data_parallel import run_data_parallel

        result = run_data_parallel(config, params, trial_id=trial_id, run_dir=run_dir,
                                   cpus_per_worker=plan.worker_cpus(params.num_gpus),
                                   threads_per_worker=plan.threads(params.num_gpus), use_gpu=plan.gpus > 0,
                                   confirm_of=spec.get("confirm_of"))
    else:
        result, hung = _one_worker(config, params, trial_id, run_dir, spec.get("confirm_of"))
    if spec.get("rung") is not None:
        result = result.replace(info=result.info.with_(rung=spec["rung"]))
    if spec.get("repeat_of") is not None:
        result = result.replace(info=result.info.with_(repeat_of=spec["repeat_of"], seed=config.search.seed))
    tune.report(report_payload(config, result))
    if hung:
        raise TrialTimeout(result.reason)
