"""Search backends: Ray Tune + OptunaSearch (``ray``), or plain Optuna in-process (``optuna``)."""
