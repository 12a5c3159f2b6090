"""What a search keeps: the typed trial ``records`` and the run directory (``rundir``), the
source of truth a search resumes from and a report is rebuilt from."""
