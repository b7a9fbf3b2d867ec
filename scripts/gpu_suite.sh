#!/usr/bin/env bash
# gpu_suite.sh -- builds (unless a build is given), runs the GPU tests, the example, the Python GPU tests and the
# benchmarks on a machine with a GPU, and prints a short summary last. One call on the device machine.
#   scripts/gpu_suite.sh [--build DIR] [--quick] [--no-bench] [--only tests|bench]
# The device image has no SQLite/GoogleTest dev packages: build on a CPU machine (scripts/build_for_device.sh) and
# carry the build folder.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$ROOT/build-dev"
QUICK=0
BENCH=1
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD="$2"; shift ;;
    --quick) QUICK=1 ;;
    --no-bench) BENCH=0 ;;
    --only) ONLY="$2"; shift ;;
    *) echo "gpu_suite: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done
OUT="${OUT:-$ROOT/gpu_suite_out}"
mkdir -p "$OUT"
LOG="$OUT/suite.log"
: > "$LOG"
summary=()
step() { echo "== $*" | tee -a "$LOG"; }

if [ ! -x "$BUILD/tests/fa_gpu_tests" ]; then
  step "building in $BUILD"
  cmake -G Ninja -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >>"$LOG" 2>&1 && ninja -C "$BUILD" >>"$LOG" 2>&1 \
    || { echo "gpu_suite: build failed (see $LOG)"; tail -30 "$LOG"; exit 1; }
fi
LIB="$(ls "$BUILD"/lib/libfa.so* 2>/dev/null | head -1)"
export FA_CACHE_PATH="${FA_CACHE_PATH:-$OUT/cache.sqlite}"
DEVICE="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
summary+=("device: ${DEVICE:-none found}")

if [ "$ONLY" != "bench" ]; then
  step "GPU tests"
  filter="${GTEST_FILTER:-*}"
  [ $QUICK = 1 ] && export FA_TEST_CASES=60
  "$BUILD/tests/fa_gpu_tests" --gtest_filter="$filter" 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "^\[  (FAILED|PASSED|SKIPPED) |GPU SUMMARY|Failure|case [0-9]+ \[" | head -80
  rc=${PIPESTATUS[0]}
  summary+=("gpu tests: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+ test' "$OUT/gpu_tests.log" | tr '\n' ' ') (rc $rc)")
  while IFS= read -r l; do summary+=("$l"); done < <(grep "GPU SUMMARY" "$OUT/gpu_tests.log")
  if [ -x "$BUILD/tests/fa_example_c" ]; then
    step "README example"
    "$BUILD/tests/fa_example_c" 2>&1 | tee -a "$LOG" | tail -2
    summary+=("example: rc ${PIPESTATUS[0]}")
  fi
  if [ "${SKIP_PYTHON:-0}" != 1 ] && python3 -c "import torch" 2>/dev/null && [ -n "$LIB" ] && [ -d "$ROOT/python/tests" ]; then
    step "Python tests (torch $(python3 -c 'import torch; print(torch.__version__)'))"
    FA_LIBRARY="$LIB" PYTHONPATH="$ROOT/python" python3 -m pytest -q -x "$ROOT/python/tests" 2>&1 | tee "$OUT/python_tests.log" | tail -15
    summary+=("python tests: $(tail -1 "$OUT/python_tests.log")")
  fi
fi

if [ $BENCH = 1 ] && [ "$ONLY" != "tests" ] && [ -n "$LIB" ]; then
  for b in "$ROOT"/bench/bench_*.py; do
    [ -f "$b" ] || continue
    step "benchmark $(basename "$b")"
    # Each benchmark gets the flags it declares (bench_decode.py requires --json; only bench_peers.py draws PNGs).
    name="$(basename "$b" .py)"
    args=""
    grep -q 'add_argument("--json"' "$b" && args="$args --json $OUT/$name.json"
    grep -q 'add_argument("--out"' "$b" && args="$args --out $OUT/${name}_png"
    [ $QUICK = 1 ] && grep -q 'add_argument("--quick"' "$b" && args="$args --quick"
    FA_LIBRARY="$LIB" PYTHONPATH="$ROOT/python" timeout 900 python3 "$b" $args 2>&1 | tee "$OUT/$(basename "$b" .py).log" | tail -60
    summary+=("bench $(basename "$b"): rc ${PIPESTATUS[0]}, table in $OUT/$(basename "$b" .py).log")
  done
fi

echo
echo "==================== SUMMARY ===================="
for s in "${summary[@]}"; do echo "$s"; done
