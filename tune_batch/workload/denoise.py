"""Noisy handwritten digits and their clean originals, and a small convolutional autoencoder that
removes the noise, scored by the validation images' mean squared error (``val_mse``): the
held-out denoising workload (``benchmarks/heldout/denoise_conv.yaml``), offline (scikit-learn's
bundled digits).

The 1797 digit images (8 x 8, values 0..16) are scaled to [0, 1] and resized to ``size`` pixels.
A seeded split puts each source image on one side only: 80 % give the training samples, the rest
the validation samples. Each sample is one source image moved by up to ``shift`` pixels in each
direction (wrapping round), with Gaussian noise of standard deviation ``noise`` added to the input;
the target is the moved clean image. The samples are drawn once, from ``seed``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset


def _samples(images: torch.Tensor, n: int, shift: int, noise: float,
             gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    pick = torch.randint(0, len(images), (n,), generator=gen)
    moves = torch.randint(-shift, shift + 1, (n, 2), generator=gen)
    clean = torch.stack([torch.roll(images[i], (int(dy), int(dx)), dims=(1, 2))
                         for i, (dy, dx) in zip(pick.tolist(), moves.tolist())])
    return (clean + noise * torch.randn(clean.shape, generator=gen)).contiguous(), clean.contiguous()


def data(rows: int = 8192, val_rows: int = 1024, size: int = 16, noise: float = 0.4, shift: int = 2,
         seed: int = 0) -> tuple[Dataset, Dataset]:
    """(train, val): ``rows`` and ``val_rows`` pairs of (noisy image, clean image), each of shape
    (1, ``size``, ``size``), from disjoint sets of source digits."""
    from tune_batch.workload.data import digits_arrays

    if size < 8:
        raise ValueError(f"size = {size}: must be at least 8 pixels (the digits' own)")
    images = digits_arrays()[0][:, None] / 16.0
    images = nn.functional.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
    gen = torch.Generator().manual_seed(seed + 15485863)
    order = torch.randperm(len(images), generator=gen)
    cut = int(0.8 * len(images))
    train = _samples(images[order[:cut]], rows, shift, noise, gen)
    val = _samples(images[order[cut:]], val_rows, shift, noise, gen)
    return TensorDataset(*train), TensorDataset(*val)


def model(num_classes: int = 2, width: int = 16) -> nn.Module:
    """The model builder: a convolutional autoencoder (two convolutions, one of stride 2, a third
    at half resolution, a transposed convolution back up, and a last convolution to one channel;
    ReLU between). ``model.num_classes`` is not used: the output is an image."""
    w = width
    return nn.Sequential(
        nn.Conv2d(1, w, 3, padding=1), nn.ReLU(),
        nn.Conv2d(w, 2 * w, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(2 * w, 2 * w, 3, padding=1), nn.ReLU(),
        nn.ConvTranspose2d(2 * w, w, 4, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(w, 1, 3, padding=1),
    )


def step(model: nn.Module, batch: Any, device: torch.device) -> torch.Tensor:
    """``train.step``: the mean squared error between the output and the clean images."""
    x, y = batch
    return nn.functional.mse_loss(model(x.to(device)), y.to(device))


def evaluate(model: nn.Module, loader: Any, device: torch.device) -> dict[str, float]:
    """``train.evaluate``: the mean squared error per pixel over the loader (``val_mse``)."""
    total, n = 0.0, 0
    for x, y in loader:
        y = y.to(device)
        total += float(nn.functional.mse_loss(model(x.to(device)), y, reduction="sum").detach())
        n += y.numel()
    return {"val_mse": total / max(1, n)}
