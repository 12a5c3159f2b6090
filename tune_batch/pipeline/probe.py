"""``probe``: one measured trial, profiled, with its record in a run directory of its own; returns
the record and what the CLI (or a notebook) needs to show it (``output.probe`` renders it)."""

from __future__ import annotations

import gzip
import json
import math
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tune_batch.backends.address import check_address, ray_address
from tune_batch.config import Config
from tune_batch.errors import UserError
from tune_batch.pipeline.quiet import quiet_libraries
from tune_batch.pipeline.search import local_capacity, preflight
from tune_batch.store.records import Params, Status, TrialResult
from tune_batch.store.rundir import RunDir


@dataclass(frozen=True)
class ProbeResult:
    """A probe's trial and where it is kept. ``trace_steps``: ProfilerStep events in the trace
    files of the trial's trace directory (None: no trace, or none readable)."""

    result: TrialResult
    workload: str  # the model and data, in one line
    run_dir: Path
    trials_path: Path
    trace_steps: int | None

    @property
    def ok(self) -> bool:
        return self.result.status is Status.OK


def trace_steps(trace_dir: str) -> int | None:
    """ProfilerStep events in the trace files of ``trace_dir`` (None when none can be read)."""
    n, read = 0, False
    for f in Path(trace_dir).glob("*.pt.trace.json*"):
        try:
            with (gzip.open(f, "rt") if f.suffix == ".gz" else f.open()) as fh:
                events = json.load(fh).get("traceEvents", [])
        except (OSError, ValueError):
            continue
        read = True
        n += sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    return n if read else None


def probe(config: Config, batch_size: int, lr: float, num_gpus: int = 1, output: str | Path | None = None, *,
          profile: bool | None = True, on_workload: Callable[[str], None] | None = None) -> ProbeResult:
    """Run one trial of ``config`` at (``batch_size``, ``lr``, ``num_gpus``) with the full
    measurement (``num_gpus`` > 1: a worker group on Ray, started here or at search.address), and
    keep its record (trial id ``probe``) in ``output`` (default runs/<name>-probe-<timestamp>).
    ``profile``: True profiles the trial whatever the config says, False never, None as the config
    says. ``on_workload`` is called with the workload's one-line
    description once it is built, before the trial runs.

    Raises UserError for bad arguments, a workload that does not build, or an ``output`` that
    holds a search (a probe there would rewrite its config.yaml and mix its records).
    """
    if batch_size < 1 or not (math.isfinite(lr) and lr > 0) or num_gpus < 1:
        raise UserError(f"--batch-size {batch_size} --lr {lr} --num-gpus {num_gpus}: "
                        "need batch size >= 1, a finite lr > 0, num_gpus >= 1")
    if batch_size % num_gpus:
        raise UserError(f"--batch-size {batch_size} does not split evenly over --num-gpus {num_gpus} workers: give a "
                        f"multiple of {num_gpus}")
    address = ray_address(config, None) if num_gpus > 1 else None  # search.address, or RAY_ADDRESS
    if num_gpus > 1:  # refused before the output is made
        check_address(address)  # nothing answers: refused in 5 s (Ray itself retried for 13 min)
        if not address:  # this machine's capacity (a cluster's is asked when the group runs)
            capacity, what = local_capacity()
            if num_gpus > capacity:
                raise UserError(f"--num-gpus {num_gpus}: this machine has {what}; give a count it has, or set "
                                f"search.address to a cluster")
    if profile is not None:
        config = config.model_copy(update={"profile": config.profile.model_copy(update={"enabled": profile})})
    out = RunDir(f"runs/{config.name}-probe-{time.strftime('%Y%m%d-%H%M%S')}" if output is None else output)
    RunDir.check_writable(out.path)
    workload = preflight(config, batch_size=batch_size, warn=lambda m: print(f"warning: {m}", file=sys.stderr))
    if on_workload is not None:
        on_workload(workload)
    made_here = not out.path.exists()
    try:
        with quiet_libraries():  # as a search's trial: Ray's and torch's chatter kept off the report
            res = _run_probe(config, out, Params(batch_size, lr, num_gpus), address)
    except (UserError, KeyboardInterrupt):  # a cluster without the workers, Ctrl-C: no directory left with only
        if made_here:  # config.yaml
            shutil.rmtree(out.path, ignore_errors=True)
        raise
    found = trace_steps(res.info.trace_dir) if res.info.trace_dir else None
    return ProbeResult(res, workload, out.path, out.trials_path, found)


def _run_probe(config: Config, out: RunDir, params: Params, address: str | None = None) -> TrialResult:
    """The probe's one trial in ``out`` (its config written, its record appended), under its lock."""
    from tune_batch.trial import run_trial  # loads torch: only when a probe runs

    with out.lock():
        searched = [r for r in out.records()[0] if r.trial_id != "probe"]
        if searched:
            raise UserError(f"--output {str(out.path)!r} holds a search ({len(searched)} trial record(s)): "
                            f"a probe there would rewrite its config.yaml and mix its records; give the probe its "
                            f"own --output")
        out.prepare(config, force=True)
        if params.num_gpus > 1:  # a worker group, as a search's data-parallel trial runs
            from tune_batch.backends.ray.search import measure_group

            res = measure_group(config, params, out, address=address)
        else:
            res = run_trial(config, params, trial_id="probe", run_dir=out.path)
        out.append(res)
    return res
