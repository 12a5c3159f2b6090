"""``train.loop: keras`` example: the seed article's Dense network on scikit-learn's bundled digits
(8x8 images flattened to 64 features), a Keras 3 ``Sequential`` on the torch backend.

What a user writes: the compiled model and the arrays. tune_batch sets ``fit(batch_size=)`` and the
optimizer's ``learning_rate``; the metrics are those the model was compiled with.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "torch")  # a user's script sets it before importing keras

import keras  # noqa: E402


def build(hidden: int = 64, val_samples: int = 360, momentum: float = 0.9) -> dict[str, Any]:
    """The pieces of ``train.loop: keras``: a compiled Sequential model, the training arrays and the
    validation pair."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.images.reshape(len(bunch.images), -1) / 16.0).astype("float32")
    y = bunch.target.astype("int64")
    order = np.random.default_rng(0).permutation(len(y))  # a fixed split: every trial validates on the same 360
    val, tr = order[:val_samples], order[val_samples:]
    model = keras.Sequential([
        keras.Input(shape=(64,)),
        keras.layers.Dense(hidden, activation="relu"),
        keras.layers.Dense(hidden, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=momentum),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return {"model": model, "x": x[tr], "y": y[tr], "validation_data": (x[val], y[val])}
