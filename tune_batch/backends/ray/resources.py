"""What each trial asks Ray for, derived from ``num_gpus`` and the cluster."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tune_batch.config import Config
from tune_batch.errors import UserError

TRIAL_CPU_FOR_GROUP = 0.001  # a multi-worker trial's own bundle: it only waits on its worker group


@dataclass(frozen=True)
class ResourcePlan:
    gpus: int  # GPUs in the cluster (0: CPU worker processes stand in for GPUs)
    cpus_one_worker: float  # CPUs of a one-worker trial (or of each worker of a group)
    cluster_cpus: float
    concurrent: int
    gpu_choices: list[int]
    notes: list[str]

    @property
    def capacity(self) -> int:
        """The most workers a group can have here: the cluster's GPUs, or without GPUs its CPUs
        (one CPU worker process each)."""
        return self.gpus if self.gpus else int(self.cluster_cpus)

    def fits(self, n: int) -> bool:
        return n == 1 or n <= self.capacity

    def what(self) -> str:
        """What the cluster offers a worker group, in words."""
        return f"{self.gpus} GPU(s)" if self.gpus else f"{int(self.cluster_cpus)} CPU(s) for CPU worker processes"

    def threads(self, n: int) -> int:
        """Torch threads of each worker of an n-worker group (any n, a searched GPU count or the
        baseline's): a GPU worker has its GPU's CPUs, CPU workers share the trial's."""
        return max(1, int(self.cpus_one_worker)) if self.gpus else max(1, int(self.cpus_one_worker // n))

    def worker_cpus(self, n: int) -> float:
        """CPUs of each worker of an n-worker group: one node's share, less the trial's own
        sliver, so the group and its trial fit exactly (a worker group that cannot be placed
        would wait forever)."""
        if self.gpus:
            return max(TRIAL_CPU_FOR_GROUP, self.cpus_one_worker - TRIAL_CPU_FOR_GROUP)
        if n <= self.cpus_one_worker:  # the group fits on one node
            return round((self.cpus_one_worker - TRIAL_CPU_FOR_GROUP) / n, 4)
        share = min(self.cpus_one_worker, self.cluster_cpus / n)
        return round(max(TRIAL_CPU_FOR_GROUP, share - TRIAL_CPU_FOR_GROUP), 4)

    def request(self, n: int) -> dict[str, float]:
        """The Tune trial's own bundle; a group's workers get their own
        placement group (``group``)."""
        if n == 1:
            return {"CPU": self.cpus_one_worker, **({"GPU": 1.0} if self.gpus else {})}
        return {"CPU": TRIAL_CPU_FOR_GROUP}

    def for_trial(self, spec: dict[str, object]) -> dict[str, float]:
        """Tune's per-trial resource function."""
        return self.request(int(spec.get("num_gpus", 1)))  # type: ignore[call-overload]


def plan_resources(config: Config, cluster: dict[str, float], node_cpus: float) -> ResourcePlan:
    """Per-trial resources, concurrency and the ``num_gpus`` choices the cluster can ever give.

    Without GPUs a one-worker trial gets ``cpus_per_trial`` CPUs (auto: a whole node, so
    concurrent trials never share cores and distort each other's throughput), and an n-worker
    trial n CPU worker processes sharing those CPUs (gloo). With GPUs one GPU per worker.
    """
    notes: list[str] = []
    gpus = int(cluster.get("GPU", 0))
    cpus = float(cluster.get("CPU", 1))
    limit = float(cpus // gpus) if gpus else float(node_cpus)
    if config.resources.cpus_per_trial == "auto":
        per = max(1.0, float(cpus // gpus)) if gpus else float(node_cpus)
    else:
        per = float(config.resources.cpus_per_trial)
        if per > limit:
            notes.append(f"resources.cpus_per_trial = {per:g} is more than {'a GPU' if gpus else 'a node'} can have "
                         f"({limit:g}); using {limit:g}")
            per = limit
    per = max(1.0, per)
    concurrent = max(1, gpus if gpus else int(cpus // per))
    # at least one: a resumed search with no trial left still runs its repeats and confirmation runs
    plan = ResourcePlan(gpus, per, cpus, min(concurrent, max(1, config.budget.trials)), [], notes)
    kept = [n for n in config.space.num_gpus if plan.fits(n)]
    dropped = [n for n in config.space.num_gpus if n not in kept]
    if dropped:
        notes.append(f"space.num_gpus: {dropped} dropped: the cluster has {plan.what()}")
    if not kept:
        raise UserError("space.num_gpus: no choice left after filtering to the cluster; include 1")
    b = config.baseline
    if b is not None and not plan.fits(b.num_gpus):
        notes.append(f"baseline.num_gpus = {b.num_gpus}: the cluster has {plan.what()}; the baseline cannot run here "
                     f"and is not compared")
    return dataclasses.replace(plan, gpu_choices=kept)
