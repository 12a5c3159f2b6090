"""Decisions read from the records, never measured: ``repeats`` (which front candidates run
again with other seeds), ``confirm`` (which are trained at length, and what their curves say)
and ``recommend`` (the recommendation of a search)."""
