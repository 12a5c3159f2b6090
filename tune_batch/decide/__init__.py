"""Decisions read from the records, never measured: ``repeats`` (which front candidates run
again with other seeds), ``confirm`` (which are trained at length, and what their curves say),
``baseline`` (the user's current config against the recommendation) and ``recommend`` (the
recommendation of a search)."""
