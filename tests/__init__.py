"""The test suite. Imported before tests/conftest.py (and so before torch)."""

import os

# Under pytest-xdist (scripts/test.sh: two test processes on two cores) each process trains with
# as many torch threads as there are cores. OpenMP's threads spin while they wait for work, so two
# processes' threads take the cores from each other: measured on the 2-core VM, two copies of
# test_loop's language-model test took 330 s each side by side, 29 s with passive waiting (21 s
# for one alone). Set before torch is imported (OpenMP reads it once); inherited by the trial
# processes Ray and the CLI tests start. A single pytest process keeps OpenMP's default.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
