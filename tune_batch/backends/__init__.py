"""Search backends: Ray Tune + OptunaSearch (``ray``), or plain Optuna in-process (``local``), with the
search's ``progress`` lines and its ``signals``; what a backend is handed is in ``pipeline.stages``
(``Later``: the stages after the search, planned as they are asked for)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from tune_batch.config import Config
from tune_batch.store.jobs import Job, JobKind

#: The stages after the search as a backend receives them: each stage's kind and jobs, planned
#: when the backend asks for it (``pipeline.stages.Planned``).
Later = Iterator[tuple[JobKind, list[Job]]]


class TwoVerbs(Protocol):
    """A backend that runs the search's trials and a stage's jobs apart (``in_turn``)."""

    def run_trials(self, config: Config, trials: int) -> None: ...

    def run_jobs(self, config: Config, jobs: Sequence[Job], kind: JobKind) -> None: ...


def in_turn(backend: TwoVerbs, config: Config, trials: int, later: Later) -> None:
    """The search's ``trials`` (if any), then each later stage's jobs, one call each."""
    if trials > 0:
        backend.run_trials(config, trials)
    for kind, jobs in later:
        backend.run_jobs(config, jobs, kind)
