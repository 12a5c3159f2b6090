"""Live progress of a search on the terminal: one line per finished trial."""

from __future__ import annotations

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
        self.say(f"re-measuring front candidates with other seeds: {n} run(s)")

    def confirming(self, n: int) -> None:
        """``n`` confirmation runs (front candidates at a longer budget) follow."""
        self.total += n
        self.say(f"confirming front candidates at a longer budget: {n} run(s), validated along the way")

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
        if self.quiet:
            return
        done = len({r.trial_id for r in self.records if not r.info.free_skip})  # free skips use no budget
        counts = {s: sum(1 for r in self.records if r.status is s) for s in Status if s is not Status.OK}
        # the front the summary will show, as it stands (configs, their runs pooled, the noise
        # respected): the single readings' front read "front 1" beside a summary of 9 configurations
        size = self._front_size(done)
        elapsed = time.monotonic() - self._start
        left = (elapsed / self._done_here) * max(0, self.total - done)
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
