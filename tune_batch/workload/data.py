"""Data sets: CIFAR-10, scikit-learn's bundled digits, seeded synthetic images, an image folder,
or a user's ``pkg.module:function``. Every one yields (C, H, W) float tensors and int labels."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, TensorDataset

from tune_batch.config import DataConfig
from tune_batch.errors import WorkloadError
from tune_batch.workload.resolve import call_builder, resolve_callable

# ImageNet statistics: what torchvision's pretrained weights expect
_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

CIFAR_DIR = "cifar-10-batches-py"
CIFAR_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
CIFAR_TEST = "test_batch"


@dataclass(frozen=True)
class Datasets:
    train: Dataset
    val: Dataset
    num_classes: int
    description: str


def _resize(x: torch.Tensor, side: int | None) -> torch.Tensor:
    """Resize a batch (N, C, H, W) or one image (C, H, W) to side x side, bilinear."""
    if side is None or x.shape[-1] == side and x.shape[-2] == side:
        return x
    single = x.dim() == 3
    y = F.interpolate(x.unsqueeze(0) if single else x, size=(side, side), mode="bilinear", align_corners=False)
    return y.squeeze(0) if single else y


def _split(n: int, val_samples: int, seed: int, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    if val_samples >= n:
        raise WorkloadError(f"data.val_samples = {val_samples}: {what} has only {n} samples; use fewer than {n}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[val_samples:], perm[:val_samples]


def digits_arrays() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 8x8 handwritten digits: images (1797, 8, 8) as float pixel values 0-16, and
    their labels. Read from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``:
    64 pixels and the label per row) without importing scikit-learn, whose import (SciPy among
    it) took 1.4 s here against 0.03 s for the read, in every process that builds the data; the
    same values as ``sklearn.datasets.load_digits`` (a test compares them). Where the file is not
    there, ``load_digits`` itself."""
    import gzip
    import importlib.util

    import numpy as np

    spec = importlib.util.find_spec("sklearn")  # where the package is, without importing it
    homes = list(spec.submodule_search_locations or []) if spec else []
    path = Path(homes[0]) / "datasets" / "data" / "digits.csv.gz" if homes else None
    if path is None or not path.is_file():
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return torch.tensor(bunch.images, dtype=torch.float32), torch.tensor(bunch.target, dtype=torch.long)
    with gzip.open(path, "rt", encoding="ascii") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float64)
    return (torch.tensor(rows[:, :-1].reshape(-1, 8, 8), dtype=torch.float32),
            torch.tensor(rows[:, -1].astype(np.int64), dtype=torch.long))


def digits(cfg: DataConfig, seed: int) -> Datasets:
    """scikit-learn's 8x8 handwritten digits (1797 real images, shipped in its wheel), as RGB."""
    images, y = digits_arrays()
    x = images.unsqueeze(1) / 16.0  # (N, 1, 8, 8) in [0, 1]
    x = _resize(x, cfg.resize).repeat(1, 3, 1, 1)
    x = (x - _MEAN) / _STD
    tr, va = _split(len(y), cfg.val_samples, seed, "digits")
    return Datasets(TensorDataset(x[tr], y[tr]), TensorDataset(x[va], y[va]), 10,
                    f"digits ({len(tr)} train / {len(va)} val, {x.shape[-1]} px)")


def class_patterns(g: torch.Generator, classes: int, side: int, grain: int) -> torch.Tensor:
    """One smooth random 3 x ``side`` x ``side`` pattern per class: ``grain`` x ``grain`` noise from
    ``g``, upsampled bilinearly (the synthetic image sets' classes)."""
    return F.interpolate(torch.randn(classes, 3, grain, grain, generator=g), size=(side, side), mode="bilinear",
                         align_corners=False)


#: The most bytes the synthetic images are held in memory as one tensor; a larger set (224 px:
#: 6096 images took 11 GB at its peak and 29 s to build, in every trial process) is made when read.
HELD_LIMIT_BYTES = 512 * 2**20


class MadeWhenRead(Dataset):
    """Synthetic images made when read: image ``i`` is its class's pattern times its scale plus
    1.5 x one of a bank of noise images, all drawn from the seed up front (the bank, not one noise
    image per sample, keeps memory bounded and reading cheap: about 0.1 ms an image at 224 px)."""

    def __init__(self, patterns: torch.Tensor, bank: torch.Tensor, labels: torch.Tensor, scales: torch.Tensor,
                 picks: torch.Tensor) -> None:
        self.patterns, self.bank, self.labels, self.scales, self.picks = patterns, bank, labels, scales, picks

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.labels[i]
        return torch.add(self.patterns[y] * self.scales[i], self.bank[self.picks[i]], alpha=1.5), y


def _made_when_read(g: torch.Generator, protos: torch.Tensor, cfg: DataConfig, num_classes: int) -> Datasets:
    n, side = cfg.synthetic_samples + cfg.val_samples, protos.shape[-1]
    y = torch.randint(0, num_classes, (n,), generator=g)
    scale = 0.5 + torch.rand(n, generator=g)
    shift = torch.randint(-2, 3, (2,), generator=g).tolist()
    k = max(16, min(n, HELD_LIMIT_BYTES // 2 // (3 * side * side * 4)))
    bank = torch.roll(torch.randn(k, 3, side, side, generator=g), shifts=shift, dims=(2, 3))
    picks = torch.randint(0, k, (n,), generator=g)
    protos = torch.roll(protos, shifts=shift, dims=(2, 3))  # the same shift of every image, as when held

    def part(idx: slice) -> MadeWhenRead:
        return MadeWhenRead(protos, bank, y[idx], scale[idx], picks[idx])

    v = cfg.val_samples
    return Datasets(part(slice(v, n)), part(slice(0, v)), num_classes,
                    f"synthetic ({n - v} train / {v} val, {side} px, {num_classes} classes; made when read, "
                    f"{k} noise images)")


def synthetic(cfg: DataConfig, seed: int, num_classes: int) -> Datasets:
    """Seeded CIFAR-shaped images: each class a smooth random pattern, each sample that pattern
    shifted, scaled and buried in noise, so the labels can be learnt but not for free. Held as
    one tensor up to ``HELD_LIMIT_BYTES``; a larger set is made when read (``MadeWhenRead``)."""
    side = cfg.resize or 32
    g = torch.Generator().manual_seed(seed + 7919)
    protos = class_patterns(g, num_classes, side, 8)
    n = cfg.synthetic_samples + cfg.val_samples
    if n * 3 * side * side * 4 > HELD_LIMIT_BYTES:
        return _made_when_read(g, protos, cfg, num_classes)
    y = torch.randint(0, num_classes, (n,), generator=g)
    scale = 0.5 + torch.rand(n, 1, 1, 1, generator=g)
    x = protos[y] * scale + 1.5 * torch.randn(n, 3, side, side, generator=g)
    shift = torch.randint(-2, 3, (2,), generator=g).tolist()
    x = torch.roll(x, shifts=shift, dims=(2, 3))
    tr, va = torch.arange(cfg.val_samples, n), torch.arange(cfg.val_samples)
    return Datasets(TensorDataset(x[tr], y[tr]), TensorDataset(x[va], y[va]), num_classes,
                    f"synthetic ({len(tr)} train / {len(va)} val, {side} px, {num_classes} classes)")


class CifarImages(Dataset):
    """CIFAR-format images held as uint8; converted, resized and normalised per sample
    (in the DataLoader workers, as the seed's transforms do)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, side: int | None) -> None:
        self.images, self.labels, self.side = images, labels, side

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = _resize(self.images[i].float() / 255.0, self.side)
        return (x - _MEAN) / _STD, self.labels[i]


def _read_cifar_batch(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    try:
        with path.open("rb") as f:
            entry = pickle.load(f, encoding="latin1")  # noqa: S301 - the CIFAR-10 format is pickle
        data = torch.as_tensor(entry["data"], dtype=torch.uint8).reshape(-1, 3, 32, 32)
        labels = torch.as_tensor(entry.get("labels", entry.get("fine_labels")), dtype=torch.long)
    except Exception as e:
        raise WorkloadError(f"data.root: {path} is not a CIFAR-10 batch file ({type(e).__name__}: {e})") from e
    return data, labels


def cifar10(cfg: DataConfig, seed: int) -> Datasets:
    """CIFAR-10 from ``root/cifar-10-batches-py`` (the python version); downloaded when
    ``download`` is true and the files are missing. Validation samples come from the test batch."""
    folder = Path(cfg.root).expanduser() / CIFAR_DIR
    missing = [n for n in CIFAR_TRAIN + [CIFAR_TEST] if not (folder / n).exists()]
    if missing and cfg.download:
        import torchvision

        try:
            torchvision.datasets.CIFAR10(root=str(Path(cfg.root).expanduser()), train=True, download=True)
        except Exception as e:
            raise WorkloadError(
                f"data.download = true: CIFAR-10 could not be downloaded to {cfg.root!r} "
                f"({type(e).__name__}: {str(e)[:120]}); put cifar-10-batches-py there by hand or use data.name=digits"
            ) from e
        missing = [n for n in CIFAR_TRAIN + [CIFAR_TEST] if not (folder / n).exists()]
    if missing:
        raise WorkloadError(
            f"data.name = 'cifar10': {folder} lacks {', '.join(missing)}; set data.download=true "
            f"(needs the network) or point data.root at a folder holding {CIFAR_DIR}"
        )
    parts = [_read_cifar_batch(folder / n) for n in CIFAR_TRAIN]
    x_tr = torch.cat([p[0] for p in parts])
    y_tr = torch.cat([p[1] for p in parts])
    x_te, y_te = _read_cifar_batch(folder / CIFAR_TEST)
    n_val = min(cfg.val_samples, len(y_te))
    side = cfg.resize
    return Datasets(CifarImages(x_tr, y_tr, side), CifarImages(x_te[:n_val], y_te[:n_val], side), 10,
                    f"cifar10 ({len(y_tr)} train / {n_val} val, {side or 32} px)")


def imagefolder(cfg: DataConfig, seed: int) -> Datasets:
    """torchvision ImageFolder: ``root/train`` and ``root/val`` when both exist, else ``root`` split."""
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    root = Path(cfg.root).expanduser()
    if not root.is_dir():
        raise WorkloadError(f"data.root = {cfg.root!r}: no such folder for data.name = 'imagefolder'")
    steps: list[Any] = [T.Resize((cfg.resize, cfg.resize))] if cfg.resize else []
    tf = T.Compose([*steps, T.ToTensor(), T.Normalize(_MEAN.flatten().tolist(), _STD.flatten().tolist())])
    try:
        if (root / "train").is_dir() and (root / "val").is_dir():
            train, val = ImageFolder(str(root / "train"), tf), ImageFolder(str(root / "val"), tf)
            classes = len(train.classes)
        else:
            full = ImageFolder(str(root), tf)
            tr, va = _split(len(full), cfg.val_samples, seed, f"imagefolder {root}")
            train, val = torch.utils.data.Subset(full, tr.tolist()), torch.utils.data.Subset(full, va.tolist())
            classes = len(full.classes)
    except (FileNotFoundError, RuntimeError) as e:
        raise WorkloadError(f"data.root = {cfg.root!r}: not an image folder ({e})") from e
    folders = (train, val) if not isinstance(train, torch.utils.data.Subset) else (train.dataset,)
    _check_images([path for f in folders for path, _ in f.samples], cfg)  # type: ignore[attr-defined]
    return Datasets(train, val, classes, f"imagefolder {root} ({len(train)} train / {len(val)} val)")  # type: ignore[arg-type]


#: An image folder's files whose headers are read before a search (about 40 us each; a larger
#: folder has a seeded sample of this many read, and a bad file outside it fails its trials).
CHECKED_IMAGES = 100_000


def _check_images(paths: list[str], cfg: DataConfig) -> None:
    """WorkloadError naming the files of an image folder that do not open as images (every trial
    that met one failed), or the sizes of its images where they differ and nothing resizes them
    (no batch could be stacked)."""
    import random

    from PIL import Image

    picked = paths if len(paths) <= CHECKED_IMAGES else random.Random(0).sample(paths, CHECKED_IMAGES)
    bad: list[str] = []
    sizes: set[tuple[int, int]] = set()
    for path in picked:
        try:
            with Image.open(path) as im:
                sizes.add(im.size)
        except (OSError, ValueError) as e:  # PIL.UnidentifiedImageError is an OSError
            bad.append(f"{path} ({type(e).__name__})")
    if bad:
        raise WorkloadError(f"data.root = {cfg.root!r}: {len(bad)} of the {len(picked)} file(s) read are not images: "
                            f"{', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}; remove them or move them out of "
                            f"the class folders")
    if cfg.resize is None and len(sizes) > 1:
        a, b = sorted(sizes)[:2]
        raise WorkloadError(f"data.root = {cfg.root!r}: images of {len(sizes)} sizes (e.g. {a[0]}x{a[1]} and "
                            f"{b[0]}x{b[1]}) and data.resize = null: a batch needs one size; set data.resize")


def build_datasets(cfg: DataConfig, *, num_classes: int, seed: int = 0,
                   extra: dict[str, Any] | None = None) -> Datasets:
    """Build the train / val data sets of ``cfg``. Raises WorkloadError on user mistakes."""
    if ":" in cfg.name:
        fn = resolve_callable(cfg.name, "data.name")
        out = call_builder(fn, "data.name", cfg.name, **cfg.kwargs, **(extra or {}))
        if not (isinstance(out, tuple) and len(out) == 2):
            raise WorkloadError(f"data.name = {cfg.name!r} must return (train_dataset, val_dataset), "
                                f"got {type(out).__name__}")
        ds = Datasets(out[0], out[1], num_classes, f"{cfg.name} ({len(out[0])} train / {len(out[1])} val)")
    elif cfg.name == "digits":
        ds = digits(cfg, seed)
    elif cfg.name == "synthetic":
        ds = synthetic(cfg, seed, num_classes)
    elif cfg.name == "cifar10":
        ds = cifar10(cfg, seed)
    elif cfg.name == "imagefolder":
        ds = imagefolder(cfg, seed)
    else:  # config validation lets nothing else through
        raise WorkloadError(f"data.name = {cfg.name!r}: unknown data set")
    if ds.num_classes > num_classes:
        raise WorkloadError(
            f"model.num_classes = {num_classes}: the data set {cfg.name!r} has {ds.num_classes} classes; "
            f"set model.num_classes >= {ds.num_classes}"
        )
    return ds
