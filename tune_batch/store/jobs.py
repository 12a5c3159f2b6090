"""A job: one more run of a searched config, planned from the records after the search. A
repeat measures it again with another seed on the trial's budget; a confirmation run trains it
at length, validated along the way. Both are planned by ``pipeline.stages`` and run by a
backend's ``run_jobs``; their records keep ``repeat_of`` / ``confirm_of`` and the seed."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tune_batch.config import Config
from tune_batch.store.records import Params


class JobKind(str, Enum):
    REPEAT = "repeat"  # the trial's budget with another seed
    CONFIRM = "confirm"  # confirm.train_samples (or the goal's length), validated along the way


@dataclass(frozen=True)
class Job:
    trial_id: str  # the job's own record id: "<trial>s<seed>" (repeat), "<trial>c<seed>" (confirmation)
    kind: JobKind
    of: int | str | None  # the searched trial whose config it runs ("baseline" for the user's own config)
    params: Params
    seed: int
    rung: int = 1  # a confirmation run's escalation round (1: the first, at the confirmation length)
    samples: int | None = None  # its length when not the configured one (an escalation round)

    @property
    def repeat_of(self) -> int | str | None:
        return self.of if self.kind is JobKind.REPEAT else None

    @property
    def confirm_of(self) -> int | str | None:
        return self.of if self.kind is JobKind.CONFIRM else None

    def spec(self) -> dict[str, object]:
        """As a Tune trial's config: the params and the control keys of the Ray trainable."""
        lineage = "confirm_of" if self.kind is JobKind.CONFIRM else "repeat_of"
        spec = {**self.params.to_dict(), "trial_number": self.trial_id, "seed": self.seed, lineage: self.of}
        if self.samples is not None:
            spec.update(confirm_samples=self.samples, rung=self.rung)
        return spec

    def config_for(self, config: Config) -> Config:
        """The config the job's run trains with: its seed, and its length when it has its own."""
        return lengthened(seeded(config, self.seed), self.samples)


def seeded(config: Config, seed: int) -> Config:
    """``config`` with ``search.seed`` = ``seed`` (a job's run)."""
    return config.model_copy(update={"search": config.search.model_copy(update={"seed": seed})})


def lengthened(config: Config, samples: int | None) -> Config:
    """``config`` whose confirmation runs train ``samples`` (an escalation round's length); as it
    is when None. The goal's length, if any, gives way; its target stays."""
    if samples is None:
        return config
    confirm = config.confirm.model_copy(update={"train_samples": samples, "epochs": None})
    goal = config.goal
    if goal is not None:
        goal = goal.model_copy(update={"train_samples": None, "epochs": None}) if goal.target is not None else None
    return config.model_copy(update={"confirm": confirm, "goal": goal})
