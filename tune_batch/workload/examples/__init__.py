"""Builders of the shipped trainer-loop examples (``configs/lightning_cnn.yaml``,
``configs/hf_tiny_gpt2.yaml``, ``configs/keras_dense.yaml``): what a user writes for
``train.builder``. Each imports its trainer; nothing is downloaded."""
