"""Helpers of the Python package's tests."""
import os
import re
import subprocess

import pytest


def run(cmd, cwd, env, timeout=120):
    """Runs cmd; fails the test with its output when it exits non-zero."""
    p = subprocess.run(cmd, cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        pytest.fail("%s exited with %d:\n%s" % (" ".join(map(str, cmd)), p.returncode, p.stdout[-4000:]))
    return p.stdout


def costs(text, pattern):
    """The floats of every line of text matching pattern (one group)."""
    return [float(m.group(1)) for m in re.finditer(pattern, text)]


def read(path):
    with open(str(path)) as f:
        return f.read()


def fleetrun(build_dir):
    return os.path.join(build_dir, "tools", "fleetrun")
