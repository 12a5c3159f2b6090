"""Models: torchvision classifiers by name, a small built-in CNN, or a user's ``pkg.module:function``."""

from __future__ import annotations

import difflib
from typing import Any

from torch import nn

from tune_batch.config import ModelConfig
from tune_batch.errors import WorkloadError
from tune_batch.workload.resolve import call_builder, resolve_callable


def small_cnn(num_classes: int = 10, width: int = 16) -> nn.Module:
    """A three-conv CNN with BatchNorm: seconds per trial on a CPU, for quick searches and tests."""
    def block(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

    return nn.Sequential(
        *block(3, width), nn.MaxPool2d(2),
        *block(width, 2 * width), nn.MaxPool2d(2),
        *block(2 * width, 4 * width),
        nn.AdaptiveAvgPool2d(2), nn.Flatten(),
        nn.Linear(16 * width, num_classes),
    )


def mlp(num_classes: int = 10, in_features: int = 3 * 32 * 32, hidden: int = 4096, depth: int = 2) -> nn.Module:
    """Flatten, then ``depth`` bias-free Linear layers of width ``hidden`` with ReLU: almost all
    of its time is large matmuls (an MFU yardstick)."""
    layers: list[nn.Module] = [nn.Flatten()]
    width = in_features
    for _ in range(depth):
        layers += [nn.Linear(width, hidden, bias=False), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, num_classes, bias=False))
    return nn.Sequential(*layers)


BUILTIN_MODELS = {"small_cnn": small_cnn, "mlp": mlp}


def _torchvision_names() -> list[str]:
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def _replace_head(model: nn.Module, num_classes: int, name: str) -> None:
    """Swap the last Linear layer for one with ``num_classes`` outputs."""
    last: tuple[nn.Module, str, nn.Linear] | None = None
    for parent in model.modules():
        for child_name, child in parent.named_children():
            if isinstance(child, nn.Linear):
                last = (parent, child_name, child)
    if last is None:
        raise WorkloadError(
            f"model.name = {name!r}: cannot find a final Linear layer to resize to "
            f"num_classes = {num_classes}; use pretrained: false or a pkg.module:function"
        )
    parent, child_name, old = last
    setattr(parent, child_name, nn.Linear(old.in_features, num_classes))


def build_model(cfg: ModelConfig, extra: dict[str, Any] | None = None) -> nn.Module:
    """Build the model of ``cfg``; ``extra`` (user hyperparameters) go to a user builder.

    Raises WorkloadError for unknown names, builders that fail or return no nn.Module, and
    pretrained weights that cannot be downloaded.
    """
    extra = dict(extra or {})
    if ":" in cfg.name:
        fn = resolve_callable(cfg.name, "model.name")
        model = call_builder(fn, "model.name", cfg.name, num_classes=cfg.num_classes, **cfg.kwargs, **extra)
        if not isinstance(model, nn.Module):
            raise WorkloadError(f"model.name = {cfg.name!r} returned {type(model).__name__}, not a torch.nn.Module")
        return model
    if cfg.name in BUILTIN_MODELS:
        if cfg.pretrained:
            raise WorkloadError(f"model.pretrained = true: the built-in {cfg.name!r} has no pretrained weights")
        return call_builder(BUILTIN_MODELS[cfg.name], "model.name", cfg.name, num_classes=cfg.num_classes, **cfg.kwargs)

    import torchvision

    names = _torchvision_names()
    if cfg.name not in names:
        hint = difflib.get_close_matches(cfg.name, names + list(BUILTIN_MODELS), n=1)
        did = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise WorkloadError(
            f"model.name = {cfg.name!r}: unknown model{did}; allowed: a torchvision classifier "
            f"(e.g. resnet18, resnet50, mobilenet_v3_small), {', '.join(BUILTIN_MODELS)}, or pkg.module:function"
        )
    if not cfg.pretrained:
        return call_builder(torchvision.models.get_model, "model.name", cfg.name, name=cfg.name, weights=None,
                            num_classes=cfg.num_classes, **cfg.kwargs)
    weights = torchvision.models.get_model_weights(cfg.name).DEFAULT
    try:
        model = torchvision.models.get_model(cfg.name, weights=weights, **cfg.kwargs)
    except Exception as e:  # network errors come in many types (URLError, OSError, RuntimeError)
        raise WorkloadError(
            f"model.pretrained = true: could not load the {weights} weights for {cfg.name!r} "
            f"({type(e).__name__}: {str(e)[:120]}); connect once so torch caches them, or set model.pretrained=false"
        ) from e
    if cfg.num_classes != len(weights.meta["categories"]):
        _replace_head(model, cfg.num_classes, cfg.name)
    return model
