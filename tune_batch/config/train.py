"""The training loop's sections of the config: ``optimizer`` and ``train`` (precision,
accumulation, memory format, compilation, and the user's own step and evaluation)."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: torch.optim optimizers by name (lower case) -> their class in torch.optim; LBFGS needs a
#: closure and is not offered.
OPTIMIZERS = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW", "adamax": "Adamax", "nadam": "NAdam", "radam": "RAdam",
              "rmsprop": "RMSprop", "adagrad": "Adagrad", "adadelta": "Adadelta", "asgd": "ASGD"}
#: SGD's momentum unless the config says otherwise (the seed article's).
SGD_MOMENTUM = 0.9
#: Other optimizers with a momentum keyword of their own (given through optimizer.kwargs).
TAKES_MOMENTUM = ("rmsprop",)
#: Adam-like: adaptive per-parameter steps, whose learning rate scales with the square root of
#: the batch size; SGD-like ones scale linearly (Goyal et al. 2017).
ADAPTIVE = ("adam", "adamw", "adamax", "nadam", "radam", "rmsprop", "adagrad", "adadelta")
#: Whose training loop a trial runs: tune_batch's own, or the user's trainer (trial/trainers/).
Loop = Literal["tune_batch", "lightning", "transformers", "keras"]
LOOPS: tuple[str, ...] = get_args(Loop)
#: Where each trainer takes what tune_batch's own loop settings would set (train.* fields).
_TRAINER_OWN = {"precision": "fp32", "accumulation": 1, "channels_last": False, "compile": False, "step": None,
                "evaluate": None}


class Section(BaseModel):
    """Every config section: unknown keys rejected, strict types, immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True)


class OptimizerConfig(Section):
    name: str = "sgd"
    """A torch.optim optimizer by name: sgd, adam, adamw, adamax, nadam, radam, rmsprop,
    adagrad, adadelta, asgd."""
    momentum: float = Field(SGD_MOMENTUM, ge=0.0, lt=1.0)
    """SGD's momentum (the seed's 0.9); another value with another optimizer is refused (RMSprop's
    goes in kwargs)."""
    weight_decay: float = Field(0.0, ge=0.0)
    """Weight decay passed to the optimizer (0: none)."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """More keyword arguments of the optimizer (betas, eps, nesterov, ...)."""
    warmup_steps: int = Field(0, ge=0)
    """Linear learning-rate warm-up over the first optimizer steps of every trial (0: none)."""

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if v.lower() not in OPTIMIZERS:
            raise ValueError(f"allowed: {', '.join(OPTIMIZERS)}")
        return v.lower()

    @model_validator(mode="after")
    def _sgd_momentum(self) -> OptimizerConfig:
        if self.name != "sgd" and self.momentum != SGD_MOMENTUM:
            where = (f"give it as optimizer.kwargs: {{momentum: {self.momentum}}}" if self.name in TAKES_MOMENTUM
                     else f"{self.name} takes no momentum (its own settings go in optimizer.kwargs)")
            raise ValueError(f"momentum = {self.momentum} is SGD's and would be ignored by {self.name}: {where}")
        return self

    @property
    def adaptive(self) -> bool:
        return self.name in ADAPTIVE

    @property
    def keyword_args(self) -> dict[str, Any]:
        """What tune_batch's loop passes the optimizer besides lr: weight decay, SGD's momentum, and
        optimizer.kwargs (which win)."""
        return {"weight_decay": self.weight_decay, **({"momentum": self.momentum} if self.name == "sgd" else {}),
                **self.kwargs}

    @property
    def own_loop_settings(self) -> dict[str, Any]:
        """What only tune_batch's own loop reads, where the config sets it off its default: a
        trainer loop makes its own optimizer (name still says how lr scales with the batch)."""
        return {k: getattr(self, k) for k in ("momentum", "weight_decay", "kwargs", "warmup_steps")
                if getattr(self, k) != type(self).model_fields[k].get_default(call_default_factory=True)}


class TrainConfig(Section):
    precision: Literal["fp32", "tf32", "bf16", "fp16"] = "fp32"
    """fp32; tf32 (CUDA matmul/cuDNN in TF32); bf16 or fp16 autocast (fp16 with a gradient scaler)."""
    accumulation: int | Literal["auto"] = 1
    """Micro-batches per optimizer step: batch_size stays the effective batch; "auto" splits a
    batch that does not fit into the fewest micro-batches that do."""
    channels_last: bool = False
    """Model and image batches in channels-last memory format."""
    compile: Literal[False, "default", "reduce-overhead", "max-autotune"] = False
    """torch.compile the model (compile time is kept out of the window and recorded)."""
    step: str | None = None
    """"pkg.module:function" called as fn(model, batch, device) -> loss (any batch structure)."""
    evaluate: str | None = None
    """"pkg.module:function" called as fn(model, loader, device) -> {"metric": value, ...}."""
    loop: Loop = "tune_batch"
    """Whose loop a trial runs: tune_batch's own, or the user's Lightning, Transformers or Keras trainer."""
    builder: str | None = None
    """"pkg.module:function" returning the user's trainer pieces (a train.loop other than tune_batch;
    docs/trainers.md)."""
    builder_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to train.builder."""

    @field_validator("accumulation")
    @classmethod
    def _accumulation(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError("allowed: an integer >= 1, or 'auto'")
        return v

    @field_validator("step", "evaluate", "builder")
    @classmethod
    def _function(cls, v: str | None) -> str | None:
        if v is not None and (":" not in v or not all(v.split(":", 1))):
            raise ValueError("allowed: 'pkg.module:function'")
        return v

    @model_validator(mode="after")
    def _trainer_loop(self) -> TrainConfig:
        if self.loop == "tune_batch":
            if self.builder is not None:
                raise ValueError(f"builder = {self.builder!r} needs a trainer loop; allowed: train.loop = lightning, "
                                 f"transformers or keras (tune_batch's own loop takes model.name and data.name)")
            return self
        if self.builder is None:
            raise ValueError(f"loop = {self.loop!r} needs train.builder: 'pkg.module:function' returning the "
                             f"trainer's pieces (docs/trainers.md)")
        for key, default in _TRAINER_OWN.items():
            if getattr(self, key) != default:
                raise ValueError(f"{key} = {getattr(self, key)!r} is tune_batch's own loop setting; with loop = "
                                 f"{self.loop!r} set it in your trainer instead (allowed here: {default!r})")
        return self
