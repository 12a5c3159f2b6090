"""What a user reads: the terminal ``text``, the ``html`` report and its ``views``, the run
directory's ``files``, pandas ``frames`` and experiment ``tracking``."""
