"""Optuna samplers by name (``search.sampler``), shared by both backends."""

from __future__ import annotations

import math
import threading
import zlib
from typing import Any

import numpy as np
import optuna

from tune_batch.store.records import Status


def startup_trials(n_trials: int) -> int:
    """Random trials before a model-based sampler starts modelling: a third of the budget,
    between 3 and 10."""
    return min(10, max(3, n_trials // 3))


class _Wrapping(optuna.samplers.BaseSampler):
    """A sampler that hands everything to ``self._model`` unless a subclass says otherwise."""

    _model: optuna.samplers.BaseSampler

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return self._model.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        return self._model.sample_relative(study, trial, search_space)

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
        return self._model.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Any, trial: Any) -> None:
        self._model.before_trial(study, trial)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self._model.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._model.reseed_rng()


class BudgetStartup(_Wrapping):
    """A model-based Optuna sampler whose random start-up is counted in trials of the budget,
    and spread over the learning-rate range.

    A proposal the feasibility model skips is told to the study (COMPLETE, infeasible: the
    sampler learns the memory boundary from it) but uses no trial (``free_skip``). Optuna's
    samplers count every COMPLETE trial towards ``n_startup_trials``, so under a tight memory
    cap such skips ended the random start early: replayed at 25 % of the mlp and mlp_adam grids
    under the 40 % and 60 %-over caps, 3 or 4 of 10 GP seeds had 1 or 2 measured random trials
    instead of 3. Here the start-up lasts until ``n_startup`` trials that are not free skips
    are complete; the model (built with ``n_startup_trials=0``) then sees every trial, skips
    included.

    Each continuous parameter (the learning rate) of the start-up is stratified, a Latin
    hypercube over its range (log range where it is log): the k-th start-up trial's value lies,
    at a uniformly random place, in stratum ``perm[k]`` of ``n_startup`` equal parts, ``perm`` a
    seeded permutation of its own per parameter. Three independent draws all landed in the top
    third of the log range in 1 of 27 starts (on the plain_sgd_mlp grid, all three past the
    peak: the whole search scored 0.34 of the grid's hypervolume); stratified, each third is
    drawn once. The GPU count takes its choices in turn (``_rotated``). The batch size stays
    random: under a memory cap a stratum of batch sizes can lie wholly out of memory, and a
    skipped proposal is drawn again.
    """

    def __init__(self, model: optuna.samplers.BaseSampler, n_startup: int, seed: int | None) -> None:
        self._model = model
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._n_startup = n_startup
        self._seed = int(seed) if seed is not None else int(np.random.SeedSequence().entropy % 2**32)

    def _starting(self, study: optuna.Study) -> bool:
        done = study._get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,), use_cache=True)
        return sum(1 for t in done if not t.user_attrs.get("free_skip")) < self._n_startup

    def _begun(self, study: Any, trial: Any) -> int:
        """How many trials began before ``trial`` (finished and not skipped for free, or running)."""
        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING)
        return sum(1 for t in study._get_trials(deepcopy=False, states=states, use_cache=False)
                   if t.number < trial.number and not t.user_attrs.get("free_skip"))

    def _rotated(self, study: Any, trial: Any, name: str, d: optuna.distributions.CategoricalDistribution) -> Any:
        """The start-up trial's GPU count: the choices in a seeded order, one per trial begun, so
        each count is measured in the random start (drawn at random, one skip of a count at a
        batch size too small for it was the study's only trial of that count, and the model
        learned the count as infeasible). A skipped proposal keeps its count and draws again."""
        key = [self._seed % 2**32, zlib.crc32(name.encode())]
        order = np.random.RandomState(key).permutation(len(d.choices))
        return d.choices[int(order[self._begun(study, trial) % len(d.choices)])]

    def _stratified(self, study: Any, trial: Any, name: str, d: optuna.distributions.FloatDistribution) -> float:
        """The start-up trial's value of ``name``: in the stratum of the trials begun before it
        (finished and not skipped for free, or running)."""
        k = self._begun(study, trial) % self._n_startup
        key = [self._seed % 2**32, zlib.crc32(name.encode())]
        stratum = np.random.RandomState(key).permutation(self._n_startup)[k]
        u = (stratum + np.random.RandomState([*key, trial.number]).uniform()) / self._n_startup
        if d.log:
            return float(min(d.high, math.exp(math.log(d.low) + u * (math.log(d.high) - math.log(d.low)))))
        return float(min(d.high, d.low + u * (d.high - d.low)))

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {} if self._starting(study) else self._model.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        return self._model.sample_relative(study, trial, search_space) if search_space else {}

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
        if not self._starting(study):
            return self._model.sample_independent(study, trial, param_name, param_distribution)
        if isinstance(param_distribution, optuna.distributions.FloatDistribution) and param_distribution.step is None:
            return self._stratified(study, trial, param_name, param_distribution)
        if param_name == "num_gpus" and isinstance(param_distribution, optuna.distributions.CategoricalDistribution):
            return self._rotated(study, trial, param_name, param_distribution)
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def reseed_rng(self) -> None:
        self._model.reseed_rng()
        self._random.reseed_rng()


class ScaledProbe(_Wrapping):
    """After the model's random start, each proposal first carries the best learning rate found
    so far to the other batch sizes, the way an engineer scales a working config; the model
    proposes when no probe is left. The model is a BudgetStartup: its empty relative search space
    during the random start is what keeps the probe out of it.

    The anchor is the ``ok`` trial with the best ``val_acc``. Its own batch size is climbed
    first while nothing above the anchor's rate was tried there: at a fixed sample budget a
    larger rate trains further until it is unstable. A climb step is ``STEP``, or half the way
    (in log space) to the highest rate still worth trying there when that is farther: a start at
    the bottom of a 100x range reaches its top in two steps, not five. Then the larger batch
    sizes get the anchor's rate scaled by (b / b_anchor) ** ``exponent`` (1: linear, for SGD,
    Goyal et al. 2017; 0.5: square root, for adaptive optimizers), unless a trial there
    (finished or running) is within a factor ``NEAR`` of it, or one was skipped; the walk stops
    at a batch size that ran out of memory. It starts at the largest (the far end of the
    samples/s axis, where the front's fastest point lies), then takes each time the size
    farthest, in log size, from those already walked (``_ends_first``). At the far end, more
    than ``FAR`` x the anchor's batch size, one reading is followed by a second a ``STEP`` lower
    (not below the anchor's rate): so long an extrapolation of the rule overshoots where the
    rate is held by stability (plain_sgd_mlp grid: batch 16's best rate x 16 at batch 256 reads
    val_acc 0.09, a step lower 0.46). Then the next smaller batch size gets the anchor's own
    rate (more steps of the same sample budget train further, while stable); a better result
    there becomes the anchor and the walks start again from it.

    A probe stays a factor ``NEAR`` under the edge of its batch size, or steps a factor ``STEP``
    below the edge instead. Two kinds of trial mark a rate as too high: one that diverged, and
    one past the peak (a trial at the same batch size with a lower rate did better). Such a rate
    at batch size c is the edge at c and at every smaller batch size (noisier gradients are no
    more stable), and at a larger batch size b it is the edge scaled by sqrt(b / c): a larger
    batch tolerates a larger rate, but its gradient noise falls only as the square root of its
    size, and the linear rule overshoots where the rate is held by stability rather than noise.
    Probes are marked on their trial (system attribute ``tune_batch_probe``).

    Why: on the deep_mlp grid the Gaussian process spent most trials at the edges of the
    learning-rate range while the front lay on one ridge next to the divergence boundary
    (README, "Choosing the sampler").
    """

    NEAR = 1.6
    STEP = 2.5
    FAR = 4
    ATTR = "tune_batch_probe"

    def __init__(self, model: BudgetStartup, exponent: float) -> None:
        self._model = model
        self._exponent = exponent

    def _probe(self, study: Any, space: dict[str, Any]) -> dict[str, Any] | None:
        dist, lr_dist = space.get("batch_size"), space.get("lr")
        if dist is None or lr_dist is None:
            return None
        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING)
        tried = [t for t in study._get_trials(deepcopy=False, states=states, use_cache=False)
                 if "batch_size" in t.params and "lr" in t.params]
        done = [t for t in tried if t.state == optuna.trial.TrialState.COMPLETE]
        ok = [t for t in done if t.user_attrs.get("status") == Status.OK and "metric:val_acc" in t.user_attrs]
        if not ok:
            return None

        def acc(t: Any) -> float:
            return t.user_attrs["metric:val_acc"]

        anchor = max(ok, key=lambda t: (acc(t), t.user_attrs.get("metric:samples_per_s", 0.0)))
        b0, lr0 = anchor.params["batch_size"], anchor.params["lr"]

        too_high = [t for t in done if t.user_attrs.get("status") == Status.DIVERGED]
        too_high += [t for t in ok if any(u.params["batch_size"] == t.params["batch_size"]  # past the peak
                                          and u.params["lr"] < t.params["lr"] and acc(u) > acc(t) for u in ok)]

        def edge(b: int) -> float:  # the smallest rate known to be too high at batch size b
            return min((t.params["lr"] * math.sqrt(max(1.0, b / t.params["batch_size"])) for t in too_high),
                       default=math.inf)

        def under_edge(b: int, lr: float, floor: float = 0.0) -> float:  # lr, or a STEP below b's edge if near it
            e = edge(b)
            return lr if lr < e / self.NEAR else max(floor, e / self.STEP)

        def free(b: int, lr: float) -> dict[str, Any] | None:  # the probe, unless a trial at b is near it
            lr = min(lr_dist.high, max(lr_dist.low, lr))
            near = any(t.params["batch_size"] == b and abs(math.log(t.params["lr"] / lr)) < math.log(self.NEAR)
                       for t in tried)
            return None if near else {"batch_size": b, "lr": lr}

        edge0 = edge(b0)
        top = min(lr_dist.high, edge0 / self.STEP)  # the highest rate worth climbing to at b0
        up = min(lr_dist.high, lr0 * max(self.STEP, math.sqrt(top / lr0)))  # sqrt < 1 < STEP when top <= lr0
        if (lr0 * self.NEAR < up < edge0 / self.NEAR
                and not any(t.params["batch_size"] == b0 and t.params["lr"] > lr0 * self.NEAR for t in tried)):
            return {"batch_size": b0, "lr": up}
        skipped = {t.params["batch_size"] for t in done if t.user_attrs.get("status") == Status.SKIPPED}
        oom = min((t.params["batch_size"] for t in done if t.user_attrs.get("status") == Status.OOM), default=math.inf)
        # up to the smallest batch size that ran out of memory (a larger one needs more)
        ups = _ends_first(sorted(c for c in dist.choices if b0 < c < oom and c not in skipped), b0)
        for b in ups:
            lr = lr0 * (b / b0) ** self._exponent
            probe = free(b, under_edge(b, lr, floor=lr0))
            if probe:
                return probe
            if b == ups[0] and b > self.FAR * b0:  # the far end: a second reading after one
                at_b = [t for t in tried if t.params["batch_size"] == b]
                probe = free(b, max(lr0, at_b[0].params["lr"] / self.STEP)) if len(at_b) == 1 else None
                if probe:
                    return probe
        below = [c for c in dist.choices if c < b0 and c not in skipped]
        if below:  # one batch size down: if it did no better there, the anchor's rate is as far as it goes
            b = max(below)
            return free(b, under_edge(b, lr0))
        return None

    def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        probe = self._probe(study, search_space) if search_space else None
        if probe is None:
            return self._model.sample_relative(study, trial, search_space)
        study._storage.set_trial_system_attr(trial._trial_id, self.ATTR, True)
        rest = {k: v for k, v in search_space.items() if k not in probe}
        return {**probe, **(self._model.sample_relative(study, trial, rest) if rest else {})}


def _ends_first(sizes: list[int], start: int) -> list[int]:
    """``sizes`` (ascending, all above ``start``) in the order ScaledProbe walks them: the largest,
    then each time the one farthest in log size from ``start`` and those already taken."""
    out, rest = sizes[-1:], sizes[:-1]
    while rest:
        pick = max(rest, key=lambda c: (min(abs(math.log(c / p)) for p in [start, *out]), c))
        out.append(pick)
        rest.remove(pick)
    return out


def probe_rule(config: Any) -> str | None:
    """The scaling rule of ``ScaledProbe`` for a search (``search.scale_probe``): "sqrt" for an
    adaptive optimizer, "linear" otherwise; None (no probe) when it is off or when ``val_acc``
    is not an objective (the learning rate then decides nothing the search scores)."""
    if not config.search.scale_probe or "val_acc" not in config.metric_names:
        return None
    return "sqrt" if config.optimizer.adaptive else "linear"


class SpaceSafeGP(optuna.samplers.GPSampler):
    """Optuna's GPSampler, safe when the relative search space changes between proposals.

    ScaledProbe hands the model what is left of the space after a probe (``num_gpus`` alone when
    GPU count is searched) and the whole space otherwise. GPSampler (Optuna 5.1) keeps the
    fitted kernels of the objectives and of the constraints as warm starts; it drops the
    objectives' when the dimension changes, but tests the constraints' against the objectives'
    cache it has just refitted, so a stale constraint kernel of the other dimension is reused
    and the fit fails (``IndexError`` in ``gp.py``'s ``loss_func``). Both caches are dropped
    here whenever the set of searched parameters changes.
    """

    _space_keys: tuple[str, ...] | None = None

    def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        keys = tuple(sorted(search_space))
        if keys != self._space_keys:
            self._gprs_cache_list = None
            self._constraints_gprs_cache_list = None
            self._space_keys = keys
        return super().sample_relative(study, trial, search_space)


class PicklableNSGAII(optuna.samplers.NSGAIISampler):
    """NSGA-II that pickles: Optuna 5.1's genetic samplers hold a thread lock (``_thread_lock``),
    and Tune pickles the searcher that holds the sampler (``Tuner`` writes its state at start), so
    ``search.sampler: nsga2`` on Ray failed with "cannot pickle '_thread.lock' object". The lock
    is left out of the pickle and a new one made on loading."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_thread_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._thread_lock = threading.Lock()


def make_sampler(name: str, seed: int, n_trials: int, probe: str | None = None) -> Any:
    """An Optuna sampler for a multi-objective, constrained study.

    tpe: multivariate TPE with constant liar (parallel trials); nsga2: NSGA-II with a
    population sized to the budget; gp: Gaussian-process sampler; random: uniform. The random
    start of tpe and gp counts trials of the budget only (BudgetStartup); with ``probe`` ("linear"
    or "sqrt", ``probe_rule``) their proposals after it are ScaledProbe's first, the model's
    when it has none.
    """
    n_startup = startup_trials(n_trials)
    if name in ("tpe", "gp"):
        model = (SpaceSafeGP(seed=seed, n_startup_trials=0) if name == "gp" else
                 optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True, n_startup_trials=0))
        started = BudgetStartup(model, n_startup, seed)
        if probe is None:
            return started
        if probe not in ("linear", "sqrt"):
            raise ValueError(f"probe = {probe!r}: allowed: linear, sqrt, None")
        return ScaledProbe(started, 1.0 if probe == "linear" else 0.5)
    if name == "nsga2":
        return PicklableNSGAII(seed=seed, population_size=max(4, min(50, n_trials // 3)))
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"search.sampler = {name!r}: allowed: tpe, nsga2, gp, random")
