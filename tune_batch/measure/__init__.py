"""Measurement: it measures and returns frozen dataclasses; it never decides what to try next."""
