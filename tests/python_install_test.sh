#!/usr/bin/env bash
# Installs the Python package as its users install things, into a fresh virtual environment
# (python3 -m venv --system-site-packages, for Debian's numpy, pytest and Dask), with pip from the
# repository root and no network (--no-build-isolation --no-index), then runs the pytest suite
# against the installed package: not the build tree, which is on no path here.
#
# The extension is built through CMake by setup.py, in BUILD_DIR (DEPOT_BUILD_DIR: only what
# changed is rebuilt; a build from scratch is `python3 -m build`'s, see docs/python-and-dask.md).
#
# Usage: python_install_test.sh BUILD_DIR SOURCE_DIR DEPOTD MEMFD_DEPOTD
# Exits 0 when all holds, 1 on the first failure, saying what.
set -euo pipefail

if (($# < 4)); then
  echo "usage: $0 BUILD_DIR SOURCE_DIR DEPOTD MEMFD_DEPOTD" >&2
  exit 2
fi
build=$(realpath "$1")
source=$(realpath "$2")
depotd=$(realpath "$3")
memfd_depotd=$(realpath "$4")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/depot-python-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

/usr/bin/python3 -m venv --system-site-packages "$tmp/venv" || fail "python3 -m venv"
unset PYTHONPATH
(cd "$source" && DEPOT_BUILD_DIR=$build "$tmp/venv/bin/pip" install --no-build-isolation \
  --no-index --quiet .) || fail "pip install from $source"

cd "$tmp"  # nowhere near the build tree
"$tmp/venv/bin/python" - "$tmp/venv" <<'PY' || fail "depot is not imported from the venv"
import sys, depot, depot._core, depot.dask
for module in (depot, depot._core):
    assert module.__file__.startswith(sys.argv[1] + "/"), module.__file__
print("installed:", depot.__file__)
PY
DEPOTD=$depotd MEMFD_DEPOTD=$memfd_depotd PYTHONDONTWRITEBYTECODE=1 "$tmp/venv/bin/python" -m pytest -q -rs \
  -p no:cacheprovider "$source/python/tests" || fail "pytest against the installed package"
echo "PASS: pip install into a fresh venv, and the pytest suite against it"
