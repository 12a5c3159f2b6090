"""tune_batch inside your own Optuna study.

    import optuna, tune_batch
    from tune_batch.optuna import Objective

    cfg = tune_batch.load_config("configs/quickstart.yaml")
    study = optuna.create_study(directions=cfg.directions, storage="sqlite:///my.db")
    study.optimize(Objective(cfg), n_trials=8)
"""

from __future__ import annotations

from tune_batch.backends.local import Objective, check_directions, suggest

__all__ = ["Objective", "check_directions", "suggest"]
