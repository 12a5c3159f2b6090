"""Data sets and models from the config, on data the tests write (nothing is downloaded)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import tiny_config
from tune_batch.config import config_from_dict
from tune_batch.errors import WorkloadError
from tune_batch.trial import run_trial
from tune_batch.workload import build_datasets, build_model


def write_cifar(root: Path, per_batch: int = 20, test: int = 30, seed: int = 0) -> np.ndarray:
    """A CIFAR-10-format folder (python version): 5 train batches and a test batch.
    Each class is a distinct colour so the labels are learnable."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    colours = rng.integers(0, 256, size=(10, 3))

    def batch(n: int) -> dict:
        labels = rng.integers(0, 10, size=n)
        imgs = np.clip(colours[labels][:, :, None] + rng.normal(0, 20, size=(n, 3, 1024)), 0, 255).astype(np.uint8)
        return {"data": imgs.reshape(n, 3072), "labels": labels.tolist(), "batch_label": "test"}

    for i in range(1, 6):
        (folder / f"data_batch_{i}").write_bytes(pickle.dumps(batch(per_batch)))
    (folder / "test_batch").write_bytes(pickle.dumps(batch(test)))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}))
    return colours


def test_cifar10_folder_loads_resized_and_normalised(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    cfg = config_from_dict({"data": {"name": "cifar10", "root": str(tmp_path), "resize": 48, "val_samples": 25}})
    ds = build_datasets(cfg.data, num_classes=10)
    assert len(ds.train) == 100 and len(ds.val) == 25
    x, y = ds.train[0]
    assert x.shape == (3, 48, 48) and x.dtype == torch.float32 and 0 <= int(y) < 10
    assert -3 < float(x.mean()) < 3


def test_cifar10_trains_in_a_trial(tmp_path: Path) -> None:
    write_cifar(tmp_path, per_batch=64, test=64)
    cfg = tiny_config(data={"name": "cifar10", "root": str(tmp_path), "resize": 16, "val_samples": 64},
                      budget={"train_samples": 1024})
    res = run_trial(cfg, {"batch_size": 16, "lr": 0.05, "num_gpus": 1})
    assert res.status == "ok", res.reason
    assert res.metrics.val_acc > 0.3  # colours are easy; chance is 0.1
    assert "cifar10 (320 train / 64 val, 16 px)" in res.info.data


def test_cifar10_offline_without_files_is_a_clear_error(tmp_path: Path) -> None:
    cfg = config_from_dict({"data": {"name": "cifar10", "root": str(tmp_path), "download": False}})
    with pytest.raises(WorkloadError, match="lacks data_batch_1.*set data.download=true"):
        build_datasets(cfg.data, num_classes=10)


def test_cifar10_corrupt_batch_is_a_clear_error(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    cfg = config_from_dict({"data": {"name": "cifar10", "root": str(tmp_path)}})
    with pytest.raises(WorkloadError, match="data_batch_3 is not a CIFAR-10 batch file"):
        build_datasets(cfg.data, num_classes=10)


def test_digits_is_real_and_split(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from tune_batch.workload.data import digits_arrays

    cfg = config_from_dict({"data": {"name": "digits", "resize": 32, "val_samples": 397}})
    with monkeypatch.context() as m:  # read from scikit-learn's file, its loader never imported
        m.setitem(sys.modules, "sklearn.datasets", None)
        ds = build_datasets(cfg.data, num_classes=10)
        images, labels = digits_arrays()
    assert len(ds.train) + len(ds.val) == 1797 and len(ds.val) == 397
    assert ds.train[0][0].shape == (3, 32, 32)
    from sklearn.datasets import load_digits

    bunch = load_digits()  # the very values scikit-learn's loader gives
    assert torch.equal(images, torch.tensor(bunch.images, dtype=torch.float32))
    assert torch.equal(labels, torch.tensor(bunch.target, dtype=torch.long))


def test_synthetic_is_seeded_and_learnable() -> None:
    cfg = tiny_config(data={"name": "synthetic", "resize": 16, "val_samples": 200, "synthetic_samples": 1024})
    a = build_datasets(cfg.data, num_classes=10, seed=1)
    b = build_datasets(cfg.data, num_classes=10, seed=1)
    assert torch.equal(a.train[5][0], b.train[5][0])
    res = run_trial(cfg, {"batch_size": 16, "lr": 0.05, "num_gpus": 1})
    assert res.status == "ok" and res.metrics.val_acc > 0.3
    # held as one tensor: the very images the development benchmarks' grids were measured on
    x = torch.stack([a.train[i][0] for i in range(len(a.train))]).double()
    assert float(x.sum()) == pytest.approx(-23127.152133126743, rel=1e-9)
    assert float(x.abs().sum()) == pytest.approx(1032670.5502435435, rel=1e-9)
    assert sum(int(a.train[i][1]) for i in range(len(a.train))) == 4558


def test_a_synthetic_set_too_large_to_hold_is_made_when_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 224 px the default 6096 images were built as one tensor: 11 GB at the peak and 29 s, in
    the driver and again in every trial process. Above data.HELD_LIMIT_BYTES they are made when
    read, from a bank of noise images of half that size."""
    import tune_batch.workload.data as data

    big = tiny_config(data={"name": "synthetic", "resize": 224, "val_samples": 2000, "synthetic_samples": 4096})
    ds = build_datasets(big.data, num_classes=10, seed=0)
    assert isinstance(ds.train, data.MadeWhenRead) and "made when read" in ds.description
    held = sum(t.numel() * t.element_size() for t in (ds.train.bank, ds.train.patterns))
    assert held <= data.HELD_LIMIT_BYTES // 2 + 10 * 3 * 224 * 224 * 4
    assert len(ds.train) == 4096 and len(ds.val) == 2000 and ds.train[0][0].shape == (3, 224, 224)
    # seeded, and as learnable as the held images: a limit made small sends a small set this way
    monkeypatch.setattr(data, "HELD_LIMIT_BYTES", 2**20)
    cfg = tiny_config(data={"name": "synthetic", "resize": 16, "val_samples": 200, "synthetic_samples": 1024})
    a, b = build_datasets(cfg.data, num_classes=10, seed=1), build_datasets(cfg.data, num_classes=10, seed=1)
    assert isinstance(a.train, data.MadeWhenRead) and a.train.bank.shape[0] < len(a.train)
    assert all(torch.equal(a.train[i][0], b.train[i][0]) and a.train[i][1] == b.train[i][1] for i in (0, 5, 1023))
    assert not torch.equal(a.train[0][0], build_datasets(cfg.data, num_classes=10, seed=2).train[0][0])
    res = run_trial(cfg, {"batch_size": 16, "lr": 0.05, "num_gpus": 1})
    assert res.status == "ok" and res.metrics.val_acc > 0.3, res.metrics.val_acc


def test_imagefolder(tmp_path: Path) -> None:
    from PIL import Image

    for split in ("train", "val"):
        for c, colour in enumerate([(255, 0, 0), (0, 0, 255)]):
            d = tmp_path / split / f"class{c}"
            d.mkdir(parents=True)
            for i in range(6):
                Image.new("RGB", (20, 24), colour).save(d / f"{i}.png")
    cfg = config_from_dict({"data": {"name": "imagefolder", "root": str(tmp_path), "resize": 16}})
    ds = build_datasets(cfg.data, num_classes=10)
    assert len(ds.train) == 12 and len(ds.val) == 12 and ds.num_classes == 2
    assert ds.train[0][0].shape == (3, 16, 16)


def test_an_image_folder_with_a_file_no_trial_could_read_or_sizes_no_batch_could_stack_is_refused(
        tmp_path: Path) -> None:
    """A search on such a folder failed every trial that met the file (UnidentifiedImageError)
    or stacked two sizes; the folder is now read before anything runs."""
    from PIL import Image

    for c, side in enumerate([20, 24]):
        d = tmp_path / f"class{c}"
        d.mkdir()
        for i in range(6):
            Image.new("RGB", (side, side), (40 * i, 0, 0)).save(d / f"{i}.png")
    (tmp_path / "class0" / "broken.png").write_bytes(b"not an image")

    def build(resize: int | None) -> None:
        raw = {"data": {"name": "imagefolder", "root": str(tmp_path), "resize": resize, "val_samples": 4}}
        build_datasets(config_from_dict(raw).data, num_classes=10)

    with pytest.raises(WorkloadError, match=r"1 of the 13 file\(s\) read are not images: .*broken.png "
                                            r"\(UnidentifiedImageError\); remove them"):
        build(16)
    (tmp_path / "class0" / "broken.png").unlink()
    with pytest.raises(WorkloadError, match=r"images of 2 sizes \(e.g. 20x20 and 24x24\) and data.resize = null"):
        build(None)
    build(16)  # resized: one size


def test_more_classes_than_the_model_has_is_an_error(tmp_path: Path) -> None:
    cfg = config_from_dict({"model": {"num_classes": 5}, "data": {"name": "digits"}})
    with pytest.raises(WorkloadError, match="model.num_classes = 5.*10 classes"):
        build_datasets(cfg.data, num_classes=5)


@pytest.mark.parametrize(("name", "match"), [
    ("resnet81", "unknown model \\(did you mean 'resnet18'\\?\\)"),
    ("nosuchpkg.mod:fn", "module 'nosuchpkg.mod' does not import"),
    ("tests.workloads:nope", "has no attribute 'nope'"),
    ("tests.workloads:NOT_CALLABLE", "is a int, not a callable"),
    ("tests.workloads:not_a_model", "returned str, not a torch.nn.Module"),
])
def test_bad_models(name: str, match: str) -> None:
    cfg = config_from_dict({"model": {"name": name}})
    with pytest.raises(WorkloadError, match=match):
        build_model(cfg.model)


def test_torchvision_model_by_name_honours_num_classes() -> None:
    cfg = config_from_dict({"model": {"name": "resnet18", "num_classes": 7}})
    m = build_model(cfg.model)
    assert m(torch.randn(2, 3, 32, 32)).shape == (2, 7)


def test_pretrained_offline_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))  # an empty cache: the weights must be fetched
    cfg = config_from_dict({"model": {"name": "resnet18", "pretrained": True}})
    try:
        build_model(cfg.model)
    except WorkloadError as e:
        assert "could not load" in str(e) and "model.pretrained=false" in str(e)
    else:  # online machine: the weights came down, and the head was resized to 10 classes
        pytest.skip("online: pretrained weights downloaded")


def test_the_held_out_workloads_build_offline() -> None:
    """benchmarks/heldout: each config is valid and its data and model build here (no download)."""
    import torch

    from tests.conftest import REPO
    from tune_batch.config import load_config
    from tune_batch.pipeline.search import preflight
    from tune_batch.workload.tabular import data

    for name in ("lm_markov", "bn_wd_cnn", "tabular_mlp"):
        assert "parameters) on " in preflight(load_config(REPO / "benchmarks" / "heldout" / f"{name}.yaml"))
    train, val = data(rows=512, val_rows=128, features=12, classes=3, seed=1)
    x = torch.stack([train[i][0] for i in range(len(train))])
    assert x.shape == (512, 12) and abs(float(x.mean())) < 0.1 and abs(float(x.std()) - 1) < 0.1
    assert {int(train[i][1]) for i in range(len(train))} == {0, 1, 2} and len(val) == 128
    assert torch.equal(data(rows=512, val_rows=128, features=12, classes=3, seed=1)[0][5][0], train[5][0])


def test_shifted_images_place_each_pattern_at_its_own_offset() -> None:
    """bn_wd_cnn's data: every sample is its class's pattern rolled by its own offset, scaled,
    plus noise; the same call gives the same data."""
    import torch

    from tune_batch.workload.shifted_images import data

    train, val = data(samples=256, val_samples=64, side=12, classes=4, noise=0.0, shift=3, seed=2)
    assert len(train) == 256 and len(val) == 64 and train[0][0].shape == (3, 12, 12)
    x, y = train.tensors
    assert set(y.tolist()) == {0, 1, 2, 3}
    # without noise each image is one of its class's patterns rolled by at most 3 px each way, times a scale
    first = {}
    offsets = set()
    for i in range(64):
        c = int(y[i])
        ref = first.setdefault(c, x[i])
        hits = [(a, b) for a in range(-6, 7) for b in range(-6, 7)
                if torch.allclose(torch.roll(ref, (a, b), (1, 2)) / ref.norm(),
                                  x[i] / x[i].norm(), atol=1e-5)]
        assert hits, i
        offsets.add(hits[0])
    assert len(offsets) > 5  # offsets differ from sample to sample
    again = data(samples=256, val_samples=64, side=12, classes=4, noise=0.0, shift=3, seed=2)[0].tensors[0]
    assert torch.equal(again, x)


def test_the_regression_workload_standardises_its_target_and_scores_the_mean_at_about_one() -> None:
    """friedman_mlp's data, step and evaluation: float targets standardised on the training rows,
    a model that predicts 0 (their mean) scores val_mse about 1, and no chance rate is made up
    from float labels."""
    import torch
    from torch.utils.data import DataLoader

    from tests.conftest import REPO
    from tune_batch.config import load_config
    from tune_batch.pipeline.search import preflight
    from tune_batch.trial.evaluate import chance_rate
    from tune_batch.workload.regression import data, evaluate, step

    assert "parameters) on " in preflight(load_config(REPO / "benchmarks" / "heldout" / "friedman_mlp.yaml"))
    train, val = data(rows=1024, val_rows=256, features=8, noise=0.5, seed=1)
    x, y = train.tensors
    assert x.shape == (1024, 8) and y.dtype == torch.float32 and abs(float(y.mean())) < 1e-4
    assert abs(float(y.std()) - 1) < 1e-3
    zero = torch.nn.Linear(8, 1)
    torch.nn.init.zeros_(zero.weight), torch.nn.init.zeros_(zero.bias)
    with torch.no_grad():  # as the trial's evaluation calls it
        mse = evaluate(zero, DataLoader(val, batch_size=64), torch.device("cpu"))["val_mse"]
    assert 0.7 < mse < 1.3
    loss = step(zero, next(iter(DataLoader(train, batch_size=32))), torch.device("cpu"))
    assert loss.requires_grad and float(loss) > 0
    assert chance_rate(val) is None


def test_the_sequence_workload_labels_each_sequence_by_its_most_frequent_signal_token() -> None:
    """gru_majority's data and model: integer token sequences whose label is the signal token
    they hold most of, a GRU classifier over them, and a clear error for impossible classes."""
    import torch

    from tests.conftest import REPO
    from tune_batch.config import load_config
    from tune_batch.pipeline.search import preflight
    from tune_batch.workload.sequences import data, model

    assert "parameters) on " in preflight(load_config(REPO / "benchmarks" / "heldout" / "gru_majority.yaml"))
    kw = {"rows": 512, "val_rows": 128, "length": 16, "vocab": 12, "classes": 3, "signal": 0.3, "seed": 2}
    train, val = data(**kw)
    x, y = train.tensors
    assert x.shape == (512, 16) and x.dtype == torch.long and int(x.max()) < 12 and set(y.tolist()) == {0, 1, 2}
    counts = torch.stack([(x == c).sum(1) for c in range(3)], 1)
    best = counts.max(1).values
    assert bool((counts[torch.arange(512), y] == best).all())  # the label holds the most (a tie: one of them)
    assert bool((counts.argmax(1) == y).float().mean() > 0.8)
    assert torch.equal(data(**kw)[0].tensors[0], x) and len(val) == 128  # seeded
    assert model(num_classes=3, vocab=12, embed=8, hidden=16)(x[:5]).shape == (5, 3)
    with pytest.raises(ValueError, match="classes = 13"):
        data(vocab=12, classes=13)
    # the bag of tokens (bag_adagrad): order does not matter to it, the counts do
    from tune_batch.workload.sequences import bag_model

    assert "parameters) on " in preflight(load_config(REPO / "benchmarks" / "heldout" / "bag_adagrad.yaml"))
    bag = bag_model(num_classes=3, vocab=12, embed=8, hidden=16)
    out = bag(x[:5])
    assert out.shape == (5, 3) and torch.allclose(bag(x[:5].flip(1)), out, atol=1e-6)
    assert not torch.allclose(bag(torch.zeros_like(x[:5])), out)
    # self-attention with positions (attn_majority): the order reaches it, unlike the bag
    from tune_batch.workload.sequences import attention_model

    assert "parameters) on " in preflight(load_config(REPO / "benchmarks" / "heldout" / "attn_majority.yaml"))
    torch.manual_seed(0)
    attn = attention_model(num_classes=3, vocab=12, length=16, embed=8, heads=2, ff=16)
    with torch.no_grad():
        attn.position.normal_()  # learned positions start at zero: give them values, as training would
        out = attn(x[:5])
        assert out.shape == (5, 3) and not torch.allclose(attn(x[:5].flip(1)), out, atol=1e-4)


def test_categorical_fields_are_seeded_and_need_the_pairs():
    """The categorical-fields workload (fields_radam): one shared vocabulary (field f's values at
    f x cardinality ...), Zipf-like frequencies, labels from per-value and per-pair scores."""
    from tests.conftest import REPO
    from tune_batch.config import load_config
    from tune_batch.pipeline.search import preflight
    from tune_batch.workload.categorical import data, model

    kw = {"rows": 4096, "val_rows": 256, "fields": 4, "cardinality": 8, "classes": 3, "seed": 2}
    train, val = data(**kw)
    x, y = train.tensors
    assert x.shape == (4096, 4) and len(val) == 256 and set(y.tolist()) == {0, 1, 2}
    for f in range(4):  # each field in its own slice of the shared vocabulary
        assert int(x[:, f].min()) >= 8 * f and int(x[:, f].max()) < 8 * (f + 1)
    counts = torch.bincount(x[:, 0], minlength=8)
    assert counts[0] > 2 * counts[7]  # a few values common, most rare
    assert torch.equal(data(**kw)[0].tensors[0], x)  # seeded
    assert not torch.equal(data(**{**kw, "seed": 3})[0].tensors[0], x)
    # without noise the pairs decide more labels than the single values alone can
    clean = data(**{**kw, "noise": 0.0})[0].tensors[1]
    no_pairs = data(**{**kw, "noise": 0.0, "pair_weight": 0.0})[0].tensors[1]
    assert float((clean == no_pairs).float().mean()) < 0.95
    assert model(num_classes=3, fields=4, cardinality=8, embed=4, hidden=16)(x[:5]).shape == (5, 3)
    with pytest.raises(ValueError, match="each must be at least 2"):
        data(fields=1)
    assert "parameters) on " in preflight(load_config(REPO / "benchmarks" / "heldout" / "fields_radam.yaml"))


def test_sets_are_seeded_need_the_quadratic_term_and_their_model_ignores_order():
    """The sets workload (sets_adamax): tokens below the vocabulary, seeded labels from a linear plus
    quadratic score of the set's summed hidden vectors, and a Deep Sets model whose output does not
    change when a set's elements are reordered."""
    from tests.conftest import REPO
    from tune_batch.config import load_config
    from tune_batch.pipeline.search import preflight
    from tune_batch.workload.sets import data, model

    kw = {"rows": 2048, "val_rows": 256, "size": 8, "vocab": 16, "classes": 3, "seed": 2}
    train, val = data(**kw)
    x, y = train.tensors
    assert x.shape == (2048, 8) and len(val) == 256 and set(y.tolist()) == {0, 1, 2}
    assert int(x.min()) >= 0 and int(x.max()) < 16
    assert torch.equal(data(**kw)[0].tensors[1], y)  # seeded
    assert not torch.equal(data(**{**kw, "seed": 3})[0].tensors[0], x)
    # without noise the quadratic term decides labels the linear one alone does not
    clean = data(**{**kw, "noise": 0.0})[0].tensors[1]
    linear = data(**{**kw, "noise": 0.0, "quadratic": 0.0})[0].tensors[1]
    assert float((clean == linear).float().mean()) < 0.9
    net = model(num_classes=3, vocab=16, embed=4, hidden=8)
    out = net(x[:5])
    assert out.shape == (5, 3) and torch.allclose(net(x[:5, torch.randperm(8)]), out, atol=1e-5)
    with pytest.raises(ValueError, match="must be at least 2"):
        data(size=1)
    assert "parameters) on " in preflight(load_config(REPO / "benchmarks" / "heldout" / "sets_adamax.yaml"))


def test_the_waveform_workload_draws_each_shape_with_its_own_frequency_phase_and_amplitude() -> None:
    """waves_conv1d's data and model: one-channel waveforms labelled by their shape, seeded, the
    noiseless shapes distinct (a square wave takes two values, a sawtooth rises between its
    jumps), a 1-D CNN over them, and a clear error for a window too short."""
    import torch

    from tests.conftest import REPO
    from tune_batch.config import load_config
    from tune_batch.pipeline.search import preflight
    from tune_batch.workload.waves import SHAPES, data, model

    assert "parameters) on " in preflight(load_config(REPO / "benchmarks" / "heldout" / "waves_conv1d.yaml"))
    train, val = data(rows=600, val_rows=60, length=64, noise=0.0, seed=3)
    x, y = train.tensors
    assert x.shape == (600, 1, 64) and x.dtype == torch.float32 and set(y.tolist()) == set(range(len(SHAPES)))
    square = x[y == SHAPES.index("square"), 0]
    assert bool(((square.abs() - square.abs()[:, :1]).abs() < 1e-5).all())  # +-amplitude only
    saw = x[y == SHAPES.index("sawtooth"), 0]
    assert float((saw.diff(dim=1) > 0).float().mean()) > 0.9  # rising but at its jumps
    assert len({round(float(a), 3) for a in square.abs()[:, 0]}) > 10  # amplitudes of their own
    assert torch.equal(data(rows=600, val_rows=60, length=64, noise=0.0, seed=3)[0].tensors[0], x) and len(val) == 60
    assert model()(x[:5]).shape == (5, len(SHAPES))
    with pytest.raises(ValueError, match="length = 8"):
        data(length=8)


def test_the_denoising_workload_pairs_noisy_digits_with_clean_ones_from_disjoint_sources() -> None:
    """denoise_conv's data and model: (noisy, clean) image pairs, seeded; the noise is the
    difference and has the stated spread; validation sources are other digits than training
    ones; the autoencoder returns an image; val_mse of the identity is the noise's variance."""
    import torch

    from tests.conftest import REPO
    from tune_batch.config import load_config
    from tune_batch.pipeline.search import preflight
    from tune_batch.workload.denoise import data, evaluate, model

    assert "parameters) on " in preflight(load_config(REPO / "benchmarks" / "heldout" / "denoise_conv.yaml"))
    train, val = data(rows=400, val_rows=100, size=12, noise=0.3, shift=0, seed=2)
    x, y = train.tensors
    assert x.shape == y.shape == (400, 1, 12, 12) and float(y.min()) >= 0.0 and float(y.max()) <= 1.0
    assert abs(float((x - y).std()) - 0.3) < 0.01
    assert torch.equal(data(rows=400, val_rows=100, size=12, noise=0.3, shift=0, seed=2)[0].tensors[0], x)
    # with no move, each clean image is one source digit: no validation image is a training one
    seen = {tuple(img.flatten().tolist()) for img in y}
    assert not any(tuple(img.flatten().tolist()) in seen for img in val.tensors[1])
    assert model(width=4)(x[:3]).shape == (3, 1, 12, 12)
    from torch.utils.data import DataLoader

    mse = evaluate(torch.nn.Identity(), DataLoader(val, batch_size=32), torch.device("cpu"))["val_mse"]
    assert abs(mse - 0.09) < 0.01
    with pytest.raises(ValueError, match="size = 4"):
        data(size=4)
