"""Search backends: Ray Tune + OptunaSearch (``ray``), or plain Optuna in-process (``local``), with the
search's ``progress`` lines and its ``signals``; what a backend is handed is in ``pipeline.stages``
(``Later``: the stages after the search, planned as they are asked for)."""

from __future__ import annotations

from collections.abc import Iterator

from tune_batch.store.jobs import Job, JobKind

#: The stages after the search as a backend receives them: each stage's kind and jobs, planned
#: when the backend asks for it (``pipeline.stages.Planned``).
Later = Iterator[tuple[JobKind, list[Job]]]
