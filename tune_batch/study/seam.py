"""The one seam between a finished trial and Optuna: the values, constraints, user attributes
and FAIL a study is told, its directions, and opening (or checking) a study.

``Objective`` (plain Optuna), the Ray searcher and the replay benchmark all tell results
through :func:`annotate` and :func:`answer` (or :func:`tell`, which is both).
"""

from __future__ import annotations

import math
from typing import Any

import optuna

from tune_batch.analysis import objectives
from tune_batch.config import Config, SpaceConfig
from tune_batch.errors import UserError
from tune_batch.store.records import Status, TrialResult
from tune_batch.study.space import PARAMS


def directions(config: Config) -> list[optuna.study.StudyDirection]:
    return [optuna.study.StudyDirection.MAXIMIZE if objectives.is_maximize(d) else optuna.study.StudyDirection.MINIMIZE
            for d in config.directions]


def check_directions(study: optuna.Study, config: Config) -> None:
    """Raise UserError when the study's directions do not match the config's objectives."""
    if list(study.directions) != directions(config):
        have = [d.name.lower() for d in study.directions]
        raise UserError(
            f"study {study.study_name!r} has directions {have}, but the objectives ({', '.join(config.metric_names)}) "
            f"need {list(config.directions)}; create the study with directions={list(config.directions)}"
        )


#: Where a trial's constraint values live: the list under the system attribute ``constraints``
#: (Optuna's ``constraints_func`` format, which Optuna 5 still reads as keys "0", "1", ... and the
#: only one optuna-dashboard reads); their names, in order, are the study user attribute
#: ``tune_batch_constraints``. One format only: writing both would count each constraint twice.
CONSTRAINTS_ATTR = "constraints"


def constraint_list(result: TrialResult) -> list[float]:
    return [objectives.constraints(result)[k] for k in objectives.CONSTRAINT_KEYS]


def user_attrs(result: TrialResult) -> dict[str, Any]:
    """A trial's user attributes: ``status``, ``reason``, ``metrics`` (every metric, one dict),
    ``free_skip`` on a skipped proposal that used no trial of the budget (samplers.BudgetStartup
    counts the others), and each finite numeric metric again under ``metric:<name>``, so that
    optuna-dashboard shows one row per metric instead of one long JSON string."""
    out: dict[str, Any] = {"status": result.status.value, "reason": result.reason, "metrics": result.metrics.to_dict()}
    if result.info.free_skip:  # told so the sampler learns the boundary, but no trial of the budget
        out["free_skip"] = True
    for name, value in out["metrics"].items():
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            out[f"metric:{name}"] = value
    return out


def annotate(trial: optuna.Trial | Any, result: TrialResult) -> None:
    """Constraints (``memory``, ``space``, ``diverged``: > 0 is infeasible) and the user
    attributes (``user_attrs``) of ``result`` on a running Optuna trial."""
    trial.storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS_ATTR, constraint_list(result))
    for key, value in user_attrs(result).items():
        trial.set_user_attr(key, value)


def _worse(floor: list[float] | None, values: list[float], maximize: list[bool]) -> list[float]:
    """Per objective, the worse of ``floor`` (None: none yet) and ``values``."""
    if floor is None:
        return list(values)
    return [min(f, v) if up else max(f, v) for f, v, up in zip(floor, values, maximize)]


def feasible_floor(study: optuna.Study) -> list[float] | None:
    """The worst value each objective reached among the study's feasible finished trials, or
    None when there is none yet."""
    maximize = [d == optuna.study.StudyDirection.MAXIMIZE for d in study.directions]
    worst: list[float] | None = None
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if t.values is not None and not any(c > 0 for c in t.constraints.values()):
            worst = _worse(worst, t.values, maximize)
    return worst


def answer(config: Config, result: TrialResult, floor: list[float] | None = None) -> list[float] | None:
    """What Optuna is told: the objective values, or None for a ``failed`` trial and for an
    ``ok`` one missing an objective (a FAIL: the sampler learns nothing false from it; the
    reason is in the user attributes). An infeasible trial (oom, skipped, diverged: its
    constraints say so) is told ``floor``, the worst values the feasible trials reached so far,
    so that Optuna's plots and the GP sampler's scaling stay those of real measurements; before
    any feasible trial, the sentinels (0 for a maximised objective)."""
    if result.status is Status.FAILED:
        return None
    if result.status is Status.OK and not result.metrics.has_finite(config.metric_names):
        return None  # an objective was not measured (e.g. NVML unreadable): not a bad point, no point
    if result.status is not Status.OK and floor is not None:
        return list(floor)
    return objectives.values(config, result)


def tell(study: optuna.Study, trial: optuna.Trial, config: Config, result: TrialResult,
         told: TrialResult | None = None) -> None:
    """Annotate ``trial`` with ``result`` and tell ``study`` its outcome (COMPLETE, or FAIL), the
    values from ``told`` when given (Policy.told: the same result, throughput as its step's mean)."""
    annotate(trial, result)
    values = answer(config, told or result, None if result.status is Status.OK else feasible_floor(study))
    if values is None:
        study.tell(trial, None, state=optuna.trial.TrialState.FAIL)
    else:
        study.tell(trial, values, state=optuna.trial.TrialState.COMPLETE)


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """An Optuna RDB storage (sqlite waits up to 30 s for a lock); UserError for a URL that is
    not one."""
    connect = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=connect)
    except Exception as e:  # SQLAlchemy's errors for a bad URL, a missing driver, no server
        raise UserError(f"--storage {url!r}: not a usable database URL ({type(e).__name__}: "
                        f"{str(e).splitlines()[0][:150]}); e.g. sqlite:///study.db") from e


def prepare(storage: optuna.storages.BaseStorage, study_name: str, config: Config) -> bool:
    """Refuse a study whose directions differ from the objectives (Ray's OptunaSearch would
    silently ignore them), and mark trials a dead process left RUNNING as FAIL so they are run
    again. Returns True when the study is new or empty (a fresh search: seed points are added)."""
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        return True
    check_directions(study, config)
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
    return not study.trials


#: Optuna's own front (``study.best_trials``, what optuna-dashboard and ``plot_pareto_front``
#: draw) is computed from the values each trial was told when it ended (its step's mean
#: samples/s at that time) with strict dominance; tune_batch's front uses the final means and
#: the noise. Both are kept: the final one as these attributes.
FRONT_ATTR = "tune_batch_front"


def annotate_study(storage: optuna.storages.BaseStorage, study_name: str, config: Config, recommended: Any,
                   run_dir: str, front: list[Any] | None = None, baseline: dict[str, Any] | None = None) -> None:
    """Objective names on the study (unless it has some); the recommended trial, the run
    directory, the baseline comparison (``pareto.json``'s ``baseline``) and tune_batch's final
    front (trial numbers) as study user attributes. A study that does not exist is left alone."""
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        return
    name_study(study, config)
    study.set_user_attr("tune_batch_recommended_trial", recommended)
    study.set_user_attr("tune_batch_run_dir", run_dir)
    if baseline is not None:  # the summary's first line, where optuna-dashboard shows the study
        study.set_user_attr("tune_batch_baseline", baseline)
    if front is None:
        return
    # (a finished Optuna trial cannot be given attributes: the study holds the list)
    study.set_user_attr(FRONT_ATTR, sorted(n for n in front if isinstance(n, int)))


def rebuild(storage: optuna.storages.BaseStorage, study_name: str, config: Config,
            records: list[TrialResult]) -> int:
    """Re-create a lost (or emptied) study from the run's records, so its trial numbers go on
    after them instead of starting at 0 again (which would hide the records of those numbers):
    each searched record becomes a finished Optuna trial with its params, values (or FAIL),
    constraints and user attributes; a number without a record becomes a FAIL placeholder.
    Returns the trials added."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    space = config.space
    dists = {"batch_size": CategoricalDistribution(space.batch_choices()),
             "lr": FloatDistribution(space.lr.low, space.lr.high, log=space.lr.log),
             "num_gpus": CategoricalDistribution(list(space.num_gpus))}
    study = optuna.create_study(storage=storage, study_name=study_name, directions=list(config.directions),
                                load_if_exists=True)
    by_number = {r.trial_id: r for r in records if isinstance(r.trial_id, int)}
    added, floor = 0, None
    for number in range(max(by_number, default=-1) + 1):
        r = by_number.get(number)
        if r is None:
            study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL,
                                                      user_attrs={"status": "lost", "reason": "no record"}))
        else:
            values = answer(config, r, floor)
            if values is not None and r.status is Status.OK:
                floor = _worse(floor, values, [objectives.is_maximize(d) for d in config.directions])
            p = r.params
            study.add_trial(optuna.trial.create_trial(
                state=optuna.trial.TrialState.COMPLETE if values is not None else optuna.trial.TrialState.FAIL,
                params={"batch_size": p.batch_size, "lr": p.lr, "num_gpus": p.num_gpus}, distributions=dists,
                values=values, system_attrs={CONSTRAINTS_ATTR: constraint_list(r)},
                user_attrs={**user_attrs(r), "rebuilt_from": "trials.jsonl"}))
        added += 1
    return added


def distributions(space: SpaceConfig, gpu_choices: list[int] | None = None) -> dict[str, Any]:
    """The Optuna distributions ``study.space.suggest`` draws from (the same choices and range)."""
    batch_size, lr, num_gpus = PARAMS
    return {batch_size: optuna.distributions.CategoricalDistribution(space.batch_choices()),
            lr: optuna.distributions.FloatDistribution(space.lr.low, space.lr.high, log=space.lr.log),
            num_gpus: optuna.distributions.CategoricalDistribution(gpu_choices or list(space.num_gpus))}


def check_space(storage: Any, study_name: str | None, config: Config, gpu_choices: list[int] | None = None,
                gpus: bool = True) -> None:
    """Refuse, in one line, a stored study whose trials drew a parameter from choices other than
    this search's (a categorical's choices cannot change within a study: Optuna raised ValueError
    "CategoricalDistribution does not support dynamic value space" from inside the first trial).
    ``gpus`` False: num_gpus left out (before a cluster says which of its choices it can run)."""
    if storage is None or study_name is None:
        return
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:  # a new study
        return
    check_study_space(study, config, gpu_choices, gpus)


def check_study_space(study: optuna.Study, config: Config, gpu_choices: list[int] | None = None,
                      gpus: bool = True) -> None:
    """``check_space`` on a study at hand (the user's own, in ``Objective``)."""
    study_name = study.study_name
    mine, seen = distributions(config.space, gpu_choices), set()
    if not gpus:
        del mine["num_gpus"]
    for trial in study.get_trials(deepcopy=False):
        for name, theirs in trial.distributions.items():
            if name not in mine or (name, repr(theirs)) in seen:
                continue
            seen.add((name, repr(theirs)))
            try:
                optuna.distributions.check_distribution_compatibility(theirs, mine[name])
            except ValueError:
                raise UserError(f"study {study_name!r} holds trials with {name} drawn from {_choices(theirs)}; this "
                                f"search draws it from {_choices(mine[name])}, and one Optuna study cannot mix "
                                f"the two; give the same space, or another study (--study-name)") from None


def _choices(d: Any) -> str:
    return str(list(d.choices)) if isinstance(d, optuna.distributions.CategoricalDistribution) else repr(d)


def create(config: Config, storage: Any, study_name: str | None, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """Create (or load) a study with the config's directions; refuses mismatching ones, and one
    whose trials drew from other choices (``check_study_space``)."""
    s = optuna.create_study(storage=storage, study_name=study_name, directions=list(config.directions),
                            sampler=sampler, load_if_exists=True)
    check_directions(s, config)
    check_study_space(s, config)  # (the study at hand: not loaded twice)
    name_study(s, config)
    return s


def name_study(study: optuna.Study, config: Config) -> None:
    """Objective names (unless the study has some) and the constraint names, in order."""
    if not study.metric_names:
        import warnings

        with warnings.catch_warnings():  # experimental since Optuna 3.2, stable in use
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(config.metric_names)
    if study.user_attrs.get("tune_batch_constraints") != list(objectives.CONSTRAINT_KEYS):
        study.set_user_attr("tune_batch_constraints", list(objectives.CONSTRAINT_KEYS))
