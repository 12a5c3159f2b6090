"""tune_batch's own exceptions.

User mistakes (a bad config, a bad flag, a missing file) raise :class:`UserError`
subclasses: the command line turns them into one line on stderr and exit code 2.
Anything else is a bug or a trial fault and keeps its traceback.
"""

from __future__ import annotations


class TuneBatchError(Exception):
    """Base class of every error tune_batch raises on purpose."""


class UserError(TuneBatchError):
    """A mistake the user can fix: printed as one line, exit code 2."""


class ConfigError(UserError):
    """The config file or an override is invalid."""


class WorkloadError(UserError):
    """The model or data set cannot be built (unknown name, offline, bad import)."""


#: How the reason of a trial stopped by a config mistake (``TrialConfigError``) begins.
CONFIG_FAULT = "config: "


class TrialConfigError(UserError):
    """A trial met a mistake in the config that every trial meets alike (an objective the
    evaluation does not return): its record is ``failed`` with the reason ``config: ...``, and the
    search stops after it instead of training every trial of the budget to the same end."""


class RunDirError(UserError):
    """The run directory cannot be used (unwritable, belongs to another config)."""


class RecordNotWritten(RunDirError):
    """A record could not be appended to trials.jsonl mid-search (it was kept elsewhere)."""


class DeviceMonitorError(TuneBatchError):
    """A device telemetry call failed (NVML); the cause is chained."""


class NothingRecorded(KeyboardInterrupt):
    """Ctrl-C before a search recorded anything (while its data and model were being checked, or
    Ray started): no run directory of its own is left, nothing to continue."""


class SearchInterrupted(TuneBatchError):
    """The search stopped before its budget (Ctrl-C, SIGTERM, SIGHUP): what finished is kept and
    reported; the same command continues it. The command line exits 128 + the signal's number
    (130 for Ctrl-C)."""

    def __init__(self, finished: int, budget: int, run_dir: str, signal_number: int = 2,
                 stage: tuple[str, int] | None = None) -> None:
        """``stage``: after the whole budget, the stage that was cut (its name, and how many of its
        runs are left): the summary printed before is from what finished."""
        if finished < budget or stage is None:
            super().__init__(f"interrupted after {finished} of {budget} trials; the finished ones are kept in "
                             f"{run_dir} (run the same command again to continue)")
        else:
            name, left = stage
            super().__init__(f"interrupted during {name}, after all {budget} trials, with {left} of its run(s) "
                             f"left: the summary above is from what finished; it is kept in {run_dir} (run the "
                             f"same command again to run the rest)")
        self.finished, self.budget, self.signal_number = finished, budget, signal_number
