"""What each trial asks Ray for, derived from ``num_gpus`` and the cluster."""

from __future__ import annotations

from dataclasses import dataclass

from tune_batch.config import Config
from tune_batch.errors import UserError

TRIAL_CPU_FOR_GROUP = 0.001  # a multi-worker trial's own bundle: it only waits on its worker group


@dataclass(frozen=True)
class ResourcePlan:
    gpus: int  # GPUs in the cluster (0: CPU worker processes stand in for GPUs)
    cpus_one_worker: float  # CPUs of a one-worker trial (or of each worker of a group)
    cluster_cpus: float
    threads_per_worker: dict[int, int]
    concurrent: int
    gpu_choices: list[int]
    notes: list[str]

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
        """The Tune trial's own bundle; a group's workers are placed by Ray Train."""
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
    capacity = gpus if gpus else int(cpus)
    kept = [n for n in config.space.num_gpus if n == 1 or n <= capacity]
    dropped = [n for n in config.space.num_gpus if n not in kept]
    if dropped:
        what = f"{gpus} GPU(s)" if gpus else f"{int(cpus)} CPU(s) for CPU worker processes"
        notes.append(f"space.num_gpus: {dropped} dropped: the cluster has {what}")
    if not kept:
        raise UserError("space.num_gpus: no choice left after filtering to the cluster; include 1")
    threads = {n: max(1, int(per // n)) if not gpus else max(1, int(per)) for n in kept}
    concurrent = max(1, gpus if gpus else int(cpus // per))
    # at least one: a resumed search with no trial left still runs its repeats and confirmation runs
    return ResourcePlan(gpus, per, cpus, threads, min(concurrent, max(1, config.budget.trials)), kept, notes)
