#!/usr/bin/env bash
# run_on_dask.sh VERSION VENV PYTEST_ARGS...: runs the Python suite on dask and distributed
# VERSION, in a venv made at VENV by ../shared/python-compat/make-venv (offline, seconds) on
# Debian's Python. Without that folder the run is skipped (exit 77, which ctest reports as a
# skip), saying why. ctest runs it once per release it tests beside Debian's.
set -euo pipefail
version=$1 venv=$2
shift 2
here=$(cd "$(dirname "$0")/../.." && pwd)
make_venv=$here/../shared/python-compat/make-venv
if [[ ! -x $make_venv ]]; then
  echo "SKIPPED: no $make_venv, which makes the venv of dask $version: this machine cannot" \
       "test depot on that release (only on Debian's, in the test 'python')"
  exit 77
fi
python=$("$make_venv" "$version" "$venv" | tail -n 1)
exec "$python" -m pytest "$@"
