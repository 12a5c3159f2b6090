"""A worker group of plain Ray actors: one process per rank, placed together, joined in one
torch process group, ended by the driver the moment any rank fails or the group overruns.

Ray Train's ``TorchTrainer`` did this before; on a 2-core machine its controller and state actors
took 9-12 s before a 2-rank group ran the first line of its loop, against about 3 s here (the
same processes, imports and gloo rendezvous). What it did for GPUs is done here too: one GPU
per rank, the ranks of a node contiguous and sharing one ``CUDA_VISIBLE_DEVICES`` (NCCL's
peer-to-peer paths need to see the other GPUs), each rank's device set, nccl's async error
handling on, and torchrun's environment variables.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from tune_batch.measure.cpu import PEERS_ENV

PROCESS_GROUP_TIMEOUT_S = 1800  # a collective's own limit; the driver's allowance ends a hung group sooner


class GroupError(RuntimeError):
    """A rank of the group failed; ``worker_failures`` maps its rank to its own exception."""

    def __init__(self, worker_failures: dict[int, BaseException]) -> None:
        rank, first = next(iter(worker_failures.items()))
        super().__init__(f"rank {rank} failed: {type(first).__name__}: {first}")
        self.worker_failures = worker_failures


@dataclass(frozen=True)
class Rank:
    """Where one rank runs and what it is told: the torchrun variables, and its CUDA device."""

    rank: int
    world: int
    local_rank: int
    local_world: int
    node_rank: int
    visible_gpus: tuple[str, ...]  # the node's GPUs as Ray names them, shared by its ranks (none without GPUs)
    device: int | None  # this rank's index among them
    peers: tuple[int, ...] = ()  # process ids of the group's other ranks on its node (their CPU is the trial's)

    def env(self, master_addr: str, master_port: int) -> dict[str, str]:
        out = {"RANK": str(self.rank), "WORLD_SIZE": str(self.world), "LOCAL_RANK": str(self.local_rank),
               "LOCAL_WORLD_SIZE": str(self.local_world), "NODE_RANK": str(self.node_rank),
               "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port)}
        if self.visible_gpus:
            out["CUDA_VISIBLE_DEVICES"] = ",".join(self.visible_gpus)
        if self.peers:
            out[PEERS_ENV] = ",".join(str(p) for p in self.peers)
        return out


def _gpu_order(gpu: str) -> tuple[int, int, str]:
    """GPU ids in numeric order ("2" before "10"); ids that are not numbers (UUIDs) after them."""
    return (0, int(gpu), "") if gpu.isdigit() else (1, 0, gpu)


def assign_ranks(where: list[tuple[str, list[str]]]) -> list[Rank]:
    """Ranks for actors at ``where`` ((node id, its GPU ids as Ray gives them) per actor, in
    creation order): a node's actors get contiguous ranks (nodes in order of first appearance,
    then by GPU id), and share the union of their GPU ids as ``CUDA_VISIBLE_DEVICES``. Returns one
    Rank per actor, in the actors' order."""
    nodes = list(dict.fromkeys(node for node, _ in where))
    mine = [sorted(gpus, key=_gpu_order) for _, gpus in where]
    order = sorted(range(len(where)), key=lambda i: (nodes.index(where[i][0]), [_gpu_order(g) for g in mine[i]], i))
    ranks: dict[int, Rank] = {}
    for r, i in enumerate(order):
        node = where[i][0]
        mates = [j for j in order if where[j][0] == node]
        visible = tuple(sorted({g for j in mates for g in mine[j]}, key=_gpu_order))
        ranks[i] = Rank(rank=r, world=len(where), local_rank=mates.index(i), local_world=len(mates),
                        node_rank=nodes.index(node), visible_gpus=visible,
                        device=visible.index(mine[i][0]) if mine[i] else None)
    return [ranks[i] for i in range(len(where))]


def with_peers(ranks: list[Rank], processes: list[tuple[str, int]]) -> list[Rank]:
    """``ranks`` (one per actor) each told the process ids of the other actors on its node
    (``processes``: (node id, pid) per actor, in the same order)."""
    return [replace(r, peers=tuple(pid for j, (node, pid) in enumerate(processes)
                                   if j != i and node == processes[i][0]))
            for i, r in enumerate(ranks)]


@ray.remote
class _RankActor:
    def where(self) -> tuple[str, list[str], str, int]:
        ids = [str(g) for g in ray.get_gpu_ids()]
        return str(ray.get_runtime_context().get_node_id()), ids, ray.util.get_node_ip_address(), os.getpid()

    def free_port(self) -> int:
        with socket.socket() as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def run(self, fn: Callable[[dict[str, Any], Rank], Any], loop_config: dict[str, Any], rank: Rank,
            master: tuple[str, int], backend: str) -> Any:
        os.environ.update(rank.env(*master))  # before torch touches CUDA: the device list is read once
        if backend == "nccl":
            os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # a dead peer fails, not blocks
        import torch
        import torch.distributed as dist

        if rank.device is not None:
            torch.cuda.set_device(rank.device)
        dist.init_process_group(backend, init_method=f"tcp://{master[0]}:{master[1]}",
                                rank=rank.rank, world_size=rank.world,
                                timeout=timedelta(seconds=PROCESS_GROUP_TIMEOUT_S))
        try:
            return fn(loop_config, rank)
        finally:
            dist.destroy_process_group()


@dataclass(frozen=True)
class GroupRun:
    """``hung``: still running when its allowance ran out (its actors were ended). Otherwise rank
    0's ``value``, or the ``error`` of the first rank that failed (a ``GroupError``)."""

    hung: bool
    value: Any = None
    error: BaseException | None = None


def run_group(fn: Callable[[dict[str, Any], Rank], Any], loop_config: dict[str, Any], *, n: int,
              cpus_per_worker: float, use_gpu: bool, allowance: Callable[[float], float],
              poll_s: float = 0.25) -> GroupRun:
    """``fn(loop_config, rank)`` on ``n`` actors (one GPU each with ``use_gpu``, nccl; gloo
    otherwise) in one placement group; asked every ``poll_s`` how many seconds it may have by
    then (``allowance``, given the seconds since the call). The actors and their reservation are
    released before it returns, whatever happened."""
    start = time.monotonic()
    bundle = {"CPU": cpus_per_worker, **({"GPU": 1.0} if use_gpu else {})}
    pg = placement_group([dict(bundle) for _ in range(n)], strategy="PACK")
    actors: list[Any] = []

    def wait(refs: list[Any], ranks: list[Rank] | None = None) -> list[Any] | None:
        """The values of ``refs`` once all are ready; None when the allowance ran out first.
        The first to fail raises a GroupError, keyed by its rank (``ranks``, one per ref) or
        else its index."""
        pending = list(refs)
        while pending:
            elapsed = time.monotonic() - start
            if elapsed >= allowance(elapsed):
                return None
            ready, pending = ray.wait(pending, num_returns=1, timeout=poll_s)
            for ref in ready:
                i = refs.index(ref)
                key = ranks[i].rank if ranks is not None else i
                try:
                    ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    raise GroupError({key: e.cause if isinstance(e.cause, BaseException) else e}) from e
                except ray.exceptions.RayError as e:  # a rank's process died (killed, out of host memory)
                    raise GroupError({key: e}) from e
        return ray.get(list(refs))

    try:
        if wait([pg.ready()]) is None:
            return GroupRun(True)
        actors = [_RankActor.options(num_cpus=cpus_per_worker, num_gpus=1 if use_gpu else 0,
                                     scheduling_strategy=PlacementGroupSchedulingStrategy(
                                         pg, placement_group_bundle_index=i)).remote() for i in range(n)]
        where = wait([a.where.remote() for a in actors])
        if where is None:
            return GroupRun(True)
        ranks = with_peers(assign_ranks([(node, gpus) for node, gpus, _, _ in where]),
                           [(node, pid) for node, _, _, pid in where])
        first = next(i for i, r in enumerate(ranks) if r.rank == 0)
        port = wait([actors[first].free_port.remote()])
        if port is None:
            return GroupRun(True)
        master = (where[first][2], port[0])
        values = wait([actors[i].run.remote(fn, loop_config, ranks[i], master, "nccl" if use_gpu else "gloo")
                       for i in range(n)], ranks)
        if values is None:
            return GroupRun(True)
        return GroupRun(False, value=values[first])
    except GroupError as e:
        return GroupRun(False, error=e)
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)
        remove_placement_group(pg)
