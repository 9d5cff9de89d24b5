#!/usr/bin/env bash
# The GPU kit's check (scripts/gpu-kit copies this file into the kit as run.sh): on a machine with
# an NVIDIA driver and nothing else of depot's, records into one log
#   1. the machine: kernel, OS, nvidia-smi (GPUs, driver, compute, persistence and MIG modes),
#      device nodes, fabric manager;
#   2. the driver's facts (bin/cuda_probe): GPUs, attributes and peer access; whether a failed
#      cuInit can be retried in one process; whether the daemon's CUDA calls work under
#      MemoryDenyWriteExecute (PR_SET_MDWE, and systemd-run -p MemoryDenyWriteExecute=yes);
#   3. each [cuda] test of cuda_test, each in a process of its own (a skip, exit 77, ends only
#      that one);
#   4. the Python [cuda] tests (python/tests/test_cuda.py, with CuPy or PyTorch where the
#      machine's Python has them), on the machine's python3 if it is a version the kit holds an
#      extension for (its own pytest if it has one, else the kit's);
#   5. device_bench --quick.
# Each step is time-limited so that the whole fits in 5 minutes (DEPOT_KIT_SECONDS, default 290).
# Without a driver or a GPU each step says so and is counted skipped. Exit status: 0 when nothing
# failed, 1 otherwise. Nothing is installed or left running; the only change outside the kit is a
# symlink to bin/depotd-run at the path device_bench was built to start depotd from, made only if
# nothing is there (and removed after).
#
# Usage: ./run.sh [LOG]   (default: gpu-check-DATE-HOST.log beside run.sh)
set -uo pipefail
kit=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source "$kit/kit.env"
log=${1:-$kit/gpu-check-$(date -u +%Y%m%dT%H%M%SZ)-$(hostname -s 2>/dev/null || echo host).log}
budget=${DEPOT_KIT_SECONDS:-290}
exec > >(tee -a "$log") 2>&1

passed=0 failed=0 skipped=0
failures=()
left() { echo $((budget - SECONDS)); }
# Runs a kit binary on the kit's loader and libraries: "${on_kit[@]}" "$kit/bin/NAME" ARGS...
on_kit=("$kit/lib/ld-linux-x86-64.so.2" --library-path "$kit/lib")
# step NAME LIMIT_SECONDS COMMAND...: runs it with a time limit (never past the budget) and
# counts it: 0 passed, 77 skipped, anything else failed.
step() {
  local name=$1 limit=$2 rc
  shift 2
  ((limit > $(left))) && limit=$(left)
  if ((limit < 5)); then
    echo "-- $name: SKIPPED (out of time: the budget is ${budget}s)"
    skipped=$((skipped + 1))
    return
  fi
  local start=$SECONDS
  timeout -k 5 "$limit" "$@"
  rc=$?
  case $rc in
    0) passed=$((passed + 1)) verdict=passed ;;
    77) skipped=$((skipped + 1)) verdict=SKIPPED ;;
    124) failed=$((failed + 1)) verdict="FAILED (timed out after ${limit}s)"
         failures+=("$name") ;;
    *) failed=$((failed + 1)) verdict="FAILED (exit $rc)" failures+=("$name") ;;
  esac
  echo "-- $name: $verdict in $((SECONDS - start))s"
}

echo "# depot GPU kit $KIT_COMMIT (built $KIT_BUILT)"
echo "run $(date -u +%FT%TZ) on $(hostname 2>/dev/null), as uid $(id -u), budget ${budget}s"

echo
echo "## 1. The machine"
uname -a
grep -E '^(PRETTY_NAME)=' /etc/os-release 2>/dev/null
echo "glibc: $(ldd --version 2>/dev/null | head -1)"
if command -v nvidia-smi >/dev/null; then
  timeout 30 nvidia-smi -L
  timeout 30 nvidia-smi --format=csv --query-gpu=index,name,uuid,driver_version,memory.total,compute_mode,persistence_mode,mig.mode.current
  timeout 30 nvidia-smi -q 2>/dev/null | grep -iE -A2 '^ *fabric' | head -20
else
  echo "nvidia-smi: not found (no NVIDIA driver installed?)"
fi
echo "device nodes: $(ls /dev/nvidia* 2>/dev/null | tr '\n' ' ')"
[[ -e /dev/nvidia0 ]] || echo "  (no /dev/nvidia0: nothing made the nodes; the unit makes one per GPU with nvidia-modprobe -c=N)"
if command -v systemctl >/dev/null; then
  echo "nvidia-fabricmanager.service: $(systemctl is-active nvidia-fabricmanager.service 2>&1)"
  echo "nvidia-persistenced.service: $(systemctl is-active nvidia-persistenced.service 2>&1)"
fi

echo
echo "## 2. The driver (cuda_probe)"
step "probe: GPUs and attributes" 30 "${on_kit[@]}" "$kit/bin/cuda_probe" info
step "probe: cuInit retried after a failure" 30 "${on_kit[@]}" "$kit/bin/cuda_probe" cuinit-retry
step "probe: the daemon's calls under PR_SET_MDWE" 30 "${on_kit[@]}" "$kit/bin/cuda_probe" mdwe
if command -v systemd-run >/dev/null && [[ -d /run/systemd/system && $(id -u) == 0 ]]; then
  step "probe: the daemon's calls under systemd MemoryDenyWriteExecute=yes" 40 \
    systemd-run --quiet --wait --pipe --collect -p MemoryDenyWriteExecute=yes \
      "${on_kit[@]}" "$kit/bin/cuda_probe" load
else
  echo "-- probe under systemd MemoryDenyWriteExecute=yes: SKIPPED (needs systemd as init and root)"
  skipped=$((skipped + 1))
fi

echo
echo "## 3. The [cuda] tests, one process each"
export DEPOT_TEST_DEPOTD=$kit/bin/depotd-run
mapfile -t tests < <("${on_kit[@]}" "$kit/bin/cuda_test" --list-test-names-only "[cuda]" 2>/dev/null | grep -v '^$')
echo "${#tests[@]} tests"
for t in "${tests[@]}"; do
  echo "### $t"
  # A comma in a Catch test spec separates names: escape it.
  step "cuda_test: $t" 120 "${on_kit[@]}" "$kit/bin/cuda_test" "${t//,/\\,}"
done

echo
echo "## 4. The Python [cuda] tests"
python=$(command -v python3 || true)
version=$([[ -n $python ]] && "$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [[ -z $python ]]; then
  echo "-- python: SKIPPED (no python3 here)"
  skipped=$((skipped + 1))
elif [[ " $KIT_PYTHON " != *" $version "* ]]; then
  echo "-- python: SKIPPED (python3 here is $version; the kit's extensions are for $KIT_PYTHON)"
  skipped=$((skipped + 1))
else
  for m in torch cupy numpy pytest; do
    "$python" -c "import $m" 2>/dev/null && echo "$m: importable" || echo "$m: not importable"
  done
  # The machine's own pytest where it has one: the kit's is the build machine's, made for its
  # Python version.
  site=$kit/python/site
  "$python" -c "import pytest" 2>/dev/null && site=
  # pytest exits 0 when every test skipped: counted skipped here, not passed.
  python_tests='
    out=$("$0" -m pytest -q -rs -p no:cacheprovider "$1" 2>&1)
    rc=$?
    echo "$out"
    ((rc != 0)) && exit "$rc"
    grep -q " passed" <<<"$out" && exit 0
    exit 77'
  step "python: test_cuda.py" 120 env PYTHONPATH="$kit/python${site:+:$site}" \
    DEPOTD="$kit/bin/depotd-run" PYTHONDONTWRITEBYTECODE=1 \
    LD_LIBRARY_PATH="$kit/lib/cxx${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    bash -c "$python_tests" "$python" "$kit/python/tests/test_cuda.py"
fi

echo
echo "## 5. device_bench --quick"
made_link=
if [[ ! -e $KIT_BENCH_DEPOTD ]] && mkdir -p "$(dirname "$KIT_BENCH_DEPOTD")" 2>/dev/null &&
   ln -s "$kit/bin/depotd-run" "$KIT_BENCH_DEPOTD" 2>/dev/null; then
  made_link=$KIT_BENCH_DEPOTD
fi
if [[ -e $KIT_BENCH_DEPOTD ]]; then
  # It exits 0 having measured nothing where there is no GPU: counted skipped then.
  bench='out=$("$@" 2>&1); rc=$?; echo "$out"; ((rc != 0)) && exit "$rc"
         grep -q "nothing measured" <<<"$out" && exit 77; exit 0'
  step "device_bench --quick" 120 bash -c "$bench" _ "${on_kit[@]}" "$kit/bin/device_bench" \
    --quick
else
  echo "-- device_bench: SKIPPED (cannot place depotd at $KIT_BENCH_DEPOTD, where it looks)"
  skipped=$((skipped + 1))
fi
[[ -n $made_link ]] && rm -f "$made_link"

echo
echo "## Summary"
echo "passed $passed, failed $failed, skipped $skipped, in $SECONDS s"
for f in "${failures[@]}"; do echo "  failed: $f"; done
echo "log: $log"
((failed == 0))
