"""The pipeline that runs trials for a user: ``search`` (a whole search: check the input, run a
backend, decide, write the reports), ``probe`` (one measured trial with the full report and a
profiler trace), ``max_batch`` (the largest batch size that fits) and ``quiet`` (the libraries'
logs while they run)."""
