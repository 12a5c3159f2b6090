"""Live progress of a search on the terminal: one line per finished trial."""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any, NamedTuple, TextIO

from tune_batch.analysis.report import build_report
from tune_batch.backends.signals import config_fault
from tune_batch.config import Config
from tune_batch.store.records import Status, TrialResult, config_mistake, failing_alike

#: The front is recomputed for a progress line once this many times its last cost has passed
FRONT_EVERY = 20
#: ... where it took longer than this (a few hundred configs; below, every line computes it)
FRONT_FREE_S = 0.1


class _Stage(NamedTuple):
    runs: int  # runs of the stage still to come
    samples: int | None  # each one's training samples (None: unknown)
    confirm: bool  # confirmation runs (they validate along the way: their own overhead)


def expected_stages(config: Config) -> list[_Stage]:
    """The stages after the trials that the config plans, as far as it says: repeats of the
    front candidates, and confirmation runs of the candidates and the baseline (a GPU count's
    stand-in or a second look adds runs that show when planned)."""
    out = []
    if config.repeats.seeds > 0 and config.repeats.candidates > 0:
        out.append(_Stage(config.repeats.candidates * config.repeats.seeds, config.budget.train_samples, False))
    if config.confirm.candidates > 0:
        per_seed = config.confirm.candidates + (config.baseline is not None)
        out.append(_Stage(per_seed * config.confirm.seeds, config.confirm_samples(None), True))
    return out


def run_seconds(runs: list[TrialResult], samples: int, confirm: bool) -> float | None:
    """A run of ``samples`` samples, estimated from ``runs`` (finished): their median overhead (wall
    seconds less training at their samples/s; confirmation runs' own where any finished, they
    validate along the way) plus ``samples`` at their median samples/s. None without a timed run."""
    timed = [(r, r.metrics.value("samples_per_s")) for r in runs if r.status is Status.OK and r.duration_s > 0]
    timed = [(r, sps) for r, sps in timed if sps and r.info.train_samples_done]
    if not timed:
        return None
    alike = [(r, sps) for r, sps in timed if (r.info.confirm_of is not None) == confirm] or timed
    overhead = statistics.median(max(0.0, r.duration_s - r.info.train_samples_done / sps) for r, sps in alike)
    return overhead + samples / statistics.median(sps for _, sps in timed)


class _Front(NamedTuple):
    size: int | str  # "?" where it could not be computed
    done: int  # trials done then
    at: float  # time.monotonic() then
    cost_s: float  # what computing it took


def _clock(seconds: float) -> str:
    s = int(max(0, seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    """Counts trials as they finish and prints ``[done/total]`` lines with the statuses so far,
    the current front size, elapsed and estimated remaining time. Quiet prints nothing."""

    def __init__(self, config: Config, total: int, *, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.config = config
        self.total = total
        self.quiet = quiet
        self.stream = stream or sys.stdout
        self.records: list[TrialResult] = []  # finished trials, earlier runs' included
        self._start = time.monotonic()
        self._done_here = 0
        self.running = 0
        self._front: _Front | None = None  # the front's size as last computed
        self._here: list[TrialResult] = []  # records finished in this process (their seconds are this run's)
        self._to_come = expected_stages(config)  # stages after the trials, until each is planned
        # a confirmation run's length where its job does not say (a second look's runs too)
        self._confirm_samples = next((s.samples for s in self._to_come if s.confirm), None)
        self._stage = _Stage(0, config.budget.train_samples, False)  # the length of the runs now running

    def __getstate__(self) -> dict[str, Any]:  # Ray pickles callbacks: a stream cannot travel
        state = dict(self.__dict__)
        state["stream"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.stream = self.stream or sys.stdout

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.stream, flush=True)

    def warn(self, text: str) -> None:
        """``warning: text``, also under --quiet: what it says (a record skipped, a study rebuilt,
        a tracker that failed) is about the run's data, not its progress."""
        print(f"warning: {text}", file=self.stream, flush=True)

    def repeating(self, n: int) -> None:
        """``n`` repeats of front candidates (other seeds) follow the search's trials."""
        self.total += n
        self._to_come = [s for s in self._to_come if s.confirm]
        self._stage = _Stage(0, self.config.budget.train_samples, False)
        self.say(f"re-measuring front candidates with other seeds: {n} run(s)")

    def confirming(self, n: int, samples: int | None = None) -> None:
        """``n`` confirmation runs (front candidates at a longer budget, ``samples`` each where
        not the config's confirmation length) follow."""
        self.total += n
        self._to_come = []
        self._stage = _Stage(0, samples or self._confirm_samples, True)
        self.say(f"confirming front candidates at a longer budget: {n} run(s), validated along the way")

    def left_s(self, done: int, elapsed: float) -> float:
        """Seconds the search has left: its runs still to come (this stage's, then the stages the
        config plans) at their lengths, each estimated from the runs finished here, at the pace
        the runs finished here kept (several at a time make it faster). Where a length or a timed
        run is missing, each run to come counts as the mean run so far."""
        stages = [self._stage._replace(runs=max(0, self.total - done)), *self._to_come]
        busy = sum(r.duration_s for r in self._here)
        est = [(s.runs, run_seconds(self._here, s.samples, s.confirm) if s.samples else None) for s in stages]
        if busy <= 0 or any(seconds is None for n, seconds in est if n > 0):
            return (elapsed / max(1, self._done_here)) * sum(n for n, _ in est)
        return elapsed / busy * sum(n * seconds for n, seconds in est if n > 0)

    def _front_size(self, done: int) -> str:
        """The front's size now, or where computing it took over FRONT_FREE_S and more than a
        FRONT_EVERY-th of the time since (thousands of trials: seconds each), then's, marked as of then."""
        now = time.monotonic()
        last = self._front
        if last is not None and last.cost_s > FRONT_FREE_S and now - last.at < FRONT_EVERY * last.cost_s:
            return f"{last.size} (as of [{last.done}])"
        try:
            size: int | str = len(build_report(self.config, self.records).front)
        except Exception:  # noqa: BLE001 - a progress line never ends a search; the summary says the rest
            size = "?"
        self._front = _Front(size, done, now, time.monotonic() - now)
        return str(size)

    def started(self) -> None:
        self.running += 1

    def finished(self, rec: TrialResult) -> None:
        self.running = max(0, self.running - 1)
        self.records.append(rec)
        # the search stops after a config mistake, or once its first trials all failed alike
        if config_fault["record"] is None and (config_mistake(rec) or failing_alike(self.records)):
            config_fault["record"] = rec
        self._done_here += 1
        self._here.append(rec)
        if self.quiet:
            return
        done = len({r.trial_id for r in self.records if not r.info.free_skip})  # free skips use no budget
        counts = {s: sum(1 for r in self.records if r.status is s) for s in Status if s is not Status.OK}
        # the front the summary will show, as it stands (configs, their runs pooled, the noise
        # respected): the single readings' front read "front 1" beside a summary of 9 configurations
        size = self._front_size(done)
        elapsed = time.monotonic() - self._start
        left = self.left_s(done, elapsed)
        p = rec.params
        what = f"trial {rec.trial_id} {rec.status.value}: batch_size={p.batch_size} lr={p.lr:.3g} num_gpus={p.num_gpus}"
        if rec.status is Status.OK:
            shown = ", ".join(f"{k} {v:.3g}" for k in self.config.metric_names
                              if (v := rec.metrics.value(k)) is not None)
            what += f" -> {shown}"
        elif rec.reason:
            what += f" ({'not counted: ' if rec.info.free_skip else ''}{rec.reason[:80]})"
        tail = (f"running {self.running} | " + " ".join(f"{s.value} {n}" for s, n in counts.items())
                + f" | front {size} | {_clock(elapsed)} elapsed, ~{_clock(left)} left")
        self.say(f"[{done}/{self.total}] {what} | {tail}")
