#!/usr/bin/env bash
# device_verify.sh -- one device call that checks a change on the GPU, with a prebuilt build-dev/
# (scripts/build_for_device.sh):
#   1. the whole GPU suite (scripts/gpu_suite.sh --no-bench: the GPU tests, the C example, the Python tests);
#   2. compute-sanitizer memcheck over the Python shape-mismatch test (torch's caching allocator off, so a read past a
#      tensor is past its own allocation) and over the C++ tests named by MEMCHECK_FILTER;
#   3. host time per Python call of two Python layers, A (a base checkout's python/ and bench/ carried under
#      .devcarry/base/, e.g. `git archive BASE python bench | tar -x -C .devcarry/base`) and B (this tree's), A B A B,
#      over the same libfa: bench/host_overhead.py (fa.attention against SDPA's FA2) and the backward's bwd_host.py.
# Logs under $OUT (at most 8 files come back); a summary prints last.
# Knobs: SKIP_SUITE, SKIP_MEMCHECK, SKIP_HOST, GTEST_FILTER (the suite's C++ tests), MEMCHECK_FILTER, SUITE_TIMEOUT,
# MEMCHECK_TIMEOUT, HOST_PAIRS (default 2).
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_suite_out}"
B="$ROOT/build-dev"
mkdir -p "$OUT"
export OUT
LIB="$(ls "$B"/lib/libfa.so* 2>/dev/null | head -1)"
t0=$(date +%s)
summary=()
lap() { echo "[device_verify] $1 done at +$(( $(date +%s) - t0 ))s"; }

export FA_CACHE_PATH="${FA_CACHE_PATH:-/tmp/fa_verify.sqlite}"  # not under $OUT: only logs come back
if [ "${SKIP_SUITE:-0}" != 1 ]; then
  timeout "${SUITE_TIMEOUT:-480}" "$ROOT/scripts/gpu_suite.sh" --build "$B" --no-bench > "$OUT/suite_stdout.log" 2>&1
  summary+=("suite rc $?")
  lap suite
fi

if [ "${SKIP_MEMCHECK:-0}" != 1 ]; then
  : > "$OUT/memcheck.log"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 FA_LIBRARY="$LIB" PYTHONPATH="$ROOT/python" timeout "${MEMCHECK_TIMEOUT:-300}" \
    compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q -p no:cacheprovider "$ROOT/python/tests/test_gpu_shape_mismatch.py" >> "$OUT/memcheck.log" 2>&1
  summary+=("memcheck python shape mismatch: rc $? ($(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1); \
$(grep -E '[0-9]+ (passed|failed)' "$OUT/memcheck.log" | tail -1))")
  if [ -n "${MEMCHECK_FILTER:-}" ]; then
    echo "== C++: $MEMCHECK_FILTER" >> "$OUT/memcheck.log"
    timeout "${MEMCHECK_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 99 \
      "$B/tests/fa_gpu_tests" --gtest_filter="$MEMCHECK_FILTER" >> "$OUT/memcheck.log" 2>&1
    summary+=("memcheck $MEMCHECK_FILTER: rc $? ($(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1))")
  fi
  lap memcheck
fi

if [ "${SKIP_HOST:-0}" != 1 ] && [ -d "$ROOT/.devcarry/base/python" ]; then
  : > "$OUT/host.log"
  for i in $(seq 1 "${HOST_PAIRS:-2}"); do
    for side in A B; do
      if [ $side = A ]; then
        py="$ROOT/.devcarry/base/python"; fwd="$ROOT/.devcarry/base/bench/host_overhead.py"
        bwd="$ROOT/.devcarry/base/bench/bwd_host.py"
      else
        py="$ROOT/python"; fwd="$ROOT/bench/host_overhead.py"; bwd="$ROOT/bench/probes/bwd_host.py"
      fi
      echo "== $side$i" >> "$OUT/host.log"
      FA_LIBRARY="$LIB" PYTHONPATH="$py" timeout 120 python3 "$fwd" --calls 3000 --rounds 5 >> "$OUT/host.log" 2>&1
      FA_LIBRARY="$LIB" PYTHONPATH="$py" timeout 120 python3 "$bwd" >> "$OUT/host.log" 2>&1
    done
  done
  lap host
fi

echo "==================== DEVICE VERIFY SUMMARY ===================="
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1
sed -n '/==== SUMMARY ====/,$p' "$OUT/suite_stdout.log" 2>/dev/null
grep -E "^\[  FAILED" "$OUT/gpu_tests.log" 2>/dev/null | head -40
for s in "${summary[@]}"; do echo "$s"; done
if [ -f "$OUT/host.log" ]; then
  echo "-- host time per call (A: base python, B: this tree), us"
  grep -E "^== |  fa |fa fwd|_bwd_impl direct|ctx.run_backward|fa / FA2" "$OUT/host.log"
fi
