"""What a config asks that will not do what its user likely means: warned by ``validate`` and at
the start of a search, not refused."""

from __future__ import annotations

import re

from tune_batch.config.schema import Config


def short_goal_epochs(config: Config, train_size: int) -> str | None:
    """Why ``goal.epochs`` over a training set of ``train_size`` samples is a run shorter than one
    trial (a length in epochs is known only once the training set is), or None."""
    from tune_batch.config.schema import short_goal

    goal = config.goal
    if goal is None or goal.epochs is None:
        return None
    samples = config.confirm_samples(train_size)
    if samples is None or samples >= config.budget.train_samples:
        return None
    return short_goal(f"goal.epochs = {goal.epochs} ({samples} samples)", samples, config.budget.train_samples)


def too_few_samples(config: Config, batch_size: int | None = None) -> str | None:
    """Why ``budget.train_samples`` cannot time a trial at ``batch_size`` (default: the space's
    smallest; it needs two steps, one warm-up and one timed), or None."""
    smallest = batch_size or min(config.space.batch_choices())
    if config.budget.train_samples >= 2 * smallest:
        return None
    of = f"--batch-size {batch_size}" if batch_size else "the smallest batch_size"
    return (f"budget.train_samples = {config.budget.train_samples}: must be at least 2 x {of} "
            f"(2 x {smallest} = {2 * smallest}: one warm-up step and one timed)")


def baseline_unused(config: Config) -> str | None:
    """Why the config's baseline will not be compared (confirmation is off), or None."""
    if config.baseline is None or (config.confirm.candidates > 0 and config.confirm_metric is not None):
        return None
    why = "(confirm.candidates = 0)" if config.confirm.candidates == 0 else "(no metric to read time to target on)"
    return (f"baseline: not compared: it is confirmed beside the candidates, and confirmation is off {why}; "
            f"set confirm.candidates >= 1, or leave baseline out")


def config_notes(config: Config) -> list[str]:
    """What the config asks that will not do what its user likely means (warned, not refused)."""
    notes = [x for x in (baseline_unused(config),) if x]
    c = config.confirm
    if c.candidates > 0 and c.train_samples is not None and c.train_samples < config.budget.train_samples:
        notes.append(f"confirm.train_samples = {c.train_samples} is shorter than one trial (budget.train_samples = "
                     f"{config.budget.train_samples}): the confirmation runs see less training than the search's "
                     f"trials did; give it a few trials' length or drop it (default: 8 trials')")
    short = [b for b in config.space.batch_choices() if config.budget.steps_short(b)]
    if short:
        notes.append(f"budget.train_samples = {config.budget.train_samples} gives fewer than 2 steps at batch_size "
                     f"{', '.join(map(str, short))}: their trials are skipped unmeasured; budget.train_samples = "
                     f"{2 * max(short)} measures them")
    given = config.given_target
    if c.stop_at_target and c.candidates > 0 and given is None:
        notes.append("confirm.stop_at_target = true does nothing here: no target is given (goal.target or "
                     "confirm.target): the default one is read from the runs' whole curves")
    unreachable = unreachable_target(config)
    if unreachable:
        notes.append(unreachable)
    points = config.space.configurations()
    if points is not None and config.budget.trials > points:
        notes.append(f"budget.trials = {config.budget.trials} but the space holds {points} configuration(s) (space.lr "
                     f"is fixed at {config.space.lr.low:g}): each is measured once and the sampler's repeats of them "
                     f"are skipped; budget.trials = {points} says the same")
    return notes


#: Lowest values of minimised metrics, known from their names: (pattern, what it is, floor).
_FLOORS = ((re.compile(r"perplexity|ppl"), "a perplexity", 1.0),
           (re.compile(r"loss|mse|mae|rmse|nll|error"), "a loss", 0.0))


def unreachable_target(config: Config) -> str | None:
    """A given target below what its minimised metric can take (a loss under 0, a perplexity under
    1), which no run reaches; None otherwise (a metric's range unknown from its name included)."""
    given, metric = config.given_target_at, config.confirm_metric
    if given is None or metric is None or metric[1] != "minimize" or config.confirm.candidates == 0:
        return None
    key, target = given
    for pattern, kind, floor in _FLOORS:
        if pattern.search(metric[0]) and target < floor:
            return (f"{key} = {target:g} is below {floor:g}, which {metric[0]} ({kind}) never goes under: no run "
                    f"reaches it, so each confirmation run trains its whole length and nothing is recommended on "
                    f"time to target")
    return None
