"""Shared fixtures of the Python package's tests (run by run.sh, which sets FLEET_LIB to the
build under test and FLEET_TEST_BUILD to its directory)."""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "seeds")


@pytest.fixture(scope="session")
def build_dir():
    b = os.environ.get("FLEET_TEST_BUILD")
    if not b:
        pytest.fail("FLEET_TEST_BUILD is not set: run the tests with tests/python/run.sh BUILD")
    return b


@pytest.fixture(scope="session")
def env(build_dir):
    """The environment of the programs the tests start: this venv's python3 first on PATH
    (the seeds run `python3 prog.py` and `python criteo_reader.py`), the library under test."""
    e = dict(os.environ)
    e["PATH"] = os.path.dirname(sys.executable) + os.pathsep + e.get("PATH", "")
    e["FLEET_LIB"] = os.path.join(build_dir, "libfleet.so")
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    e.pop("PYTHONPATH", None)
    return e


@pytest.fixture
def seed_dir(tmp_path):
    """copy(name): a fresh copy of tests/python/seeds/<name> to run a program in."""
    def copy(name):
        d = tmp_path / name
        shutil.copytree(os.path.join(SEEDS, name), str(d))
        return d
    return copy

