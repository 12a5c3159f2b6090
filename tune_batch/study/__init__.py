"""The Optuna study: the searched ``space``, the ``samplers``, the one Optuna ``seam`` (storage,
study, trial attributes) and ``admission`` (whether a proposed config runs or is skipped)."""
