"""``python -m tune_batch``."""

import sys

from tune_batch.cli import main

sys.exit(main())
