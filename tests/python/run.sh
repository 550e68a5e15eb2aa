#!/usr/bin/env bash
# run.sh BUILD [--venv-only] - runs the Python package's tests (pytest on tests/python) in a
# virtual environment made once per build directory: BUILD/pyenv, with NumPy, pytest,
# TensorBoard (its EventAccumulator reads the metrics files back: test_metrics.py),
# safetensors (tests/test_io.c reads and writes files with it), Pillow (the reference of the
# image reader's eval transform: test_image.py) and the package (pip install ./python,
# reinstalled when python/ changes).  The package
# loads BUILD/libfleet.so (FLEET_LIB); the seed programs run under BUILD/tools/fleetrun.
# --venv-only makes or reuses the environment and stops.  Prints "venv: created ..." or
# "venv: reusing ..."; fails with a message saying what is missing when python3 cannot
# make a virtual environment or pip cannot install.
set -uo pipefail
build=$(cd "${1:?usage: run.sh BUILD [--venv-only]}" && pwd) || exit 2
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=$build/pyenv
created=$venv/.fleet-created   # written once, when the environment is complete
# from PyPI; an environment made with fewer gets the rest.  safetensors: tests/test_io.c
# checks that the reference package reads our checkpoints and we read its files; six and
# pillow: Paddle's example programs import them (test_paddle_programs.py), and Pillow is the
# image reader's reference (test_image.py)
reqs="numpy pytest tensorboard safetensors six pillow"
export PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1

die() { echo "tests/python/run.sh: $*" >&2; exit 1; }

if [ ! -f "$created" ]; then
  rm -rf "$venv"
  command -v python3 >/dev/null || die "python3 is not installed (scripts/ensure-deps.sh test installs it)"
  python3 -m venv "$venv" >"$build/pyenv.log" 2>&1 ||
    die "python3 -m venv $venv failed (Debian: apt-get install python3-venv, in the test profile of scripts/ensure-deps.sh): $(tail -3 "$build/pyenv.log")"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q $reqs >>"$build/pyenv.log" 2>&1 ||
    die "pip install $reqs failed (is PyPI reachable?): $(tail -3 "$build/pyenv.log")"
  echo "$reqs" >"$venv/.fleet-reqs"
  date '+%Y-%m-%d %H:%M:%S' >"$created"
  echo "venv: created $venv"
else
  echo "venv: reusing $venv (created $(cat "$created"))"
  if [ "$(cat "$venv/.fleet-reqs" 2>/dev/null)" != "$reqs" ]; then
    # shellcheck disable=SC2086
    "$venv/bin/pip" install -q $reqs >>"$build/pyenv.log" 2>&1 ||
      die "pip install $reqs failed (is PyPI reachable?): $(tail -3 "$build/pyenv.log")"
    echo "$reqs" >"$venv/.fleet-reqs"
    echo "venv: added the packages now required ($reqs)"
  fi
fi

# The package as a user installs it; again whenever a file under python/ changed.
sum=$(cd "$root" && find python -type f -not -path 'python/build/*' -not -path '*.egg-info/*' \
        -not -path '*/__pycache__/*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-64)
if [ "$(cat "$venv/.fleet-package" 2>/dev/null)" != "$sum" ]; then
  # setuptools builds in the tree and never empties python/build: a module deleted since
  # would still be packaged
  rm -rf "$root/python/build" "$root/python/"*.egg-info
  "$venv/bin/pip" install -q --no-deps --force-reinstall "$root/python" >>"$build/pyenv.log" 2>&1 ||
    die "pip install ./python failed: $(tail -5 "$build/pyenv.log")"
  echo "$sum" >"$venv/.fleet-package"
  echo "venv: installed the package from python/"
fi
[ "${2:-}" = --venv-only ] && exit 0

export FLEET_LIB=$build/libfleet.so FLEET_TEST_BUILD=$build PATH=$venv/bin:$PATH
cd "$root/tests/python" || exit 2
# pytest empties its --basetemp at the start of each run: the seeds' copies and logs stay in BUILD
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider -o console_output_style=classic --basetemp="$build/pytest-tmp" \
  "$root/tests/python"
