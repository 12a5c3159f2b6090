"""The gradient noise scale (McCandlish et al. 2018, "An Empirical Model of Large-Batch
Training"), B_simple = tr(Sigma) / |G|^2, and the statistical efficiency it gives a batch size
(Pollux, Qiao et al. 2021).

Measured after validation, like the profiler (so it never touches the training ``val_acc``
sees), on a few of the trial's own batches, without an optimizer step: each batch's gradient is
taken on each of its halves (batch b), one backward pass per half, and on the whole (2b, their
mean). The unbiased estimates of |G|^2 and tr(Sigma) from the two batch sizes are averaged over
the batches separately, and the ratio is taken last (the ratio of noisy estimates per batch is
biased).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tune_batch.analysis.noise import mean_ci
from tune_batch.trial.loop import batch_len, split_batch, take


@dataclass(frozen=True)
class NoiseScale:
    """B_simple, the two averaged estimates it is made of, and what it cost. ``lower_bound``:
    the gradient's signal was not above its noise even after the extra batches, and b_simple is
    tr(Sigma) over the upper 95 % bound of |G|^2, the smallest noise scale these batches allow
    (None when even that bound is not positive)."""

    b_simple: float | None
    grad_sq: float  # |G|^2 estimate
    trace_sigma: float  # tr(Sigma) estimate (per-sample gradient variance, summed over parameters)
    batches: int
    small_batch: int
    seconds: float
    lower_bound: bool = False


def _grads(params: list[nn.Parameter]) -> list[torch.Tensor]:
    """A copy of the parameters' gradients (zeros where none): one extra gradient's memory."""
    return [(p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)) for p in params]


def _halves(params: list[nn.Parameter], g1: list[torch.Tensor]) -> tuple[float, float]:
    """(g1 . g2, |g1 - g2|^2), with g2 = the accumulated gradient - g1, summed in float64."""
    dot = torch.zeros((), dtype=torch.float64, device=g1[0].device)
    diff = torch.zeros((), dtype=torch.float64, device=g1[0].device)
    for p, a in zip(params, g1):
        total = p.grad.detach() if p.grad is not None else torch.zeros_like(p)
        b = (total - a).to(torch.float64)
        a64 = a.to(torch.float64)
        dot += (a64 * b).sum()
        diff += (a64 - b).pow(2).sum()
    return float(dot), float(diff)


def _signal_clear(grad_sq: list[float]) -> bool:
    """Whether the mean |G|^2 estimate is above zero by more than its 95 % half-width."""
    if len(grad_sq) < 2:
        return False
    mean, ci = mean_ci(grad_sq)
    return ci is not None and mean > ci


def noise_scale(model: nn.Module, batches: Iterator[Any], loss_of: Callable[[Any], torch.Tensor],
                n_batches: int) -> NoiseScale | None:
    """Estimate B_simple on ``n_batches`` batches (None with fewer than 2 samples per batch),
    and on more, up to 4 x n_batches, while the gradient's signal is not clearly above its
    noise (late in training, or at a small batch, it often is not).

    Per batch, the mean gradients of its two halves (batch b each), g1 and g2, give
    |G|^2 ~ g1 . g2 and tr(Sigma) ~ b |g1 - g2|^2 / 2: the estimates from batch sizes b and 2b
    (McCandlish et al., appendix A) with both halves used as the small batch."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params or n_batches <= 0:
        return None
    limit = 4 * n_batches
    t0 = time.perf_counter()
    grad_sq: list[float] = []
    trace: list[float] = []
    b = 0
    while len(grad_sq) < n_batches or (len(grad_sq) < limit and not _signal_clear(grad_sq)):
        batch = next(batches)
        b = batch_len(batch) // 2
        if b < 1:
            return None
        first, second = split_batch(take(batch, 2 * b), 2)
        model.zero_grad(set_to_none=True)
        loss_of(first).float().backward()  # .grad: the first half's mean gradient
        g1 = _grads(params)
        loss_of(second).float().backward()  # .grad: the sum of both halves' mean gradients
        dot, diff = _halves(params, g1)
        grad_sq.append(dot)
        trace.append(b * diff / 2)
        del g1
    model.zero_grad(set_to_none=True)
    g2m, s = statistics.fmean(grad_sq), statistics.fmean(trace)
    done = (len(grad_sq), b, time.perf_counter() - t0)
    if s <= 0:
        return NoiseScale(None, g2m, s, *done)
    if _signal_clear(grad_sq):
        return NoiseScale(s / g2m, g2m, s, *done)
    upper = g2m + (mean_ci(grad_sq)[1] or 0.0)  # |G|^2 is at most this (95 %): B_simple at least s / upper
    return NoiseScale(s / upper if upper > 0 else None, g2m, s, *done, lower_bound=True)


def efficiency(b_noise: float | None, batch: int, base: int) -> float | None:
    """Statistical efficiency of ``batch`` against the base batch: progress per sample relative
    to training at ``base`` (Pollux: (B_noise + base) / (B_noise + batch)); 1 at the base."""
    if b_noise is None:
        return None
    return (b_noise + base) / (b_noise + batch)
