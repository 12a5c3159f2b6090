"""Collectives of a data-parallel trial (gloo and nccl alike); no-ops with one worker."""

from __future__ import annotations

from typing import Any

import torch


def barrier(world: int) -> None:
    if world > 1:
        torch.distributed.barrier()


def all_reduce(values: list[float], ops: list[str], world: int) -> list[float]:
    """Combine one number per rank: "max", "min", "sum" or "mean"."""
    if world <= 1:
        return list(values)
    dist = torch.distributed
    on_gpu = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    out = []
    for v, op in zip(values, ops):
        t = torch.tensor([v], dtype=torch.float64, device=device)
        red = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}.get(op, dist.ReduceOp.SUM)
        dist.all_reduce(t, op=red)
        out.append(float(t.item()) / (world if op == "mean" else 1))
    return out


def group_max(value: float, world: int) -> float:
    return all_reduce([value], ["max"], world)[0]


def all_gather(obj: Any, world: int) -> list[Any]:
    if world <= 1:
        return [obj]
    gathered: list[Any] = [None] * world
    torch.distributed.all_gather_object(gathered, obj)
    return gathered
