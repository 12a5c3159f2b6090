"""Search backends: Ray Tune + OptunaSearch (``ray``), or plain Optuna in-process (``local``), with the
search's ``progress`` lines and its ``signals``."""
