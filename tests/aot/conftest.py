"""libtpu for the ahead-of-time tests: skipped without it, except under CI (CI=true, as .ci/run
sets), where a missing libtpu fails them instead of hiding them."""

import os

import pytest
from optional_packages import require

# Another process of the suite may hold libtpu's lock (any JAX process that probes for a TPU
# takes it); describing a slice needs no chip, so it must not wait for it.
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


@pytest.fixture(scope="session")
def libtpu():
    require("libtpu", "libtpu", "requirements-tpu.txt")
