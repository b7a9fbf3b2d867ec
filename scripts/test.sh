#!/usr/bin/env bash
# test.sh -- builds and runs the test suite: every CPU test (validation, generator, oracle, cache, tuner, fa-tune,
# Python package) and the NVRTC compile sweep over a covering sample of the kernel space (sm_80 and sm_90a, and a
# lighter one for Blackwell's sm_100 and sm_120; fails on any compile error or spill). GPU tests run too and skip with
# the reason when no GPU is found.
# ctest prints a line as each test ends; while it runs, a line every 30 s says how long it has run and where the
# compile sweep samples are (their progress files), so that the minutes of the sweep are never silent. ctest's own
# closing lines ("100% tests passed, ...") come last.
# The full kernel sweep is `ctest --test-dir build -L sweep_full`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${FA_BUILD_DIR:-$ROOT/build}"
export PATH="/usr/local/cuda/bin:$PATH"
cmake -G Ninja -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
SWEEP_SAMPLES="compile_sweep_sample compile_sweep_sample_blackwell"
for t in $SWEEP_SAMPLES; do rm -f "$BUILD/tests/$t.progress"; done
heartbeat() {
  local start=$SECONDS line t progress
  while sleep 30 >/dev/null 2>&1; do  # sleep holds no pipe of ours once killed
    line="test: ctest has run $(( (SECONDS - start) / 60 ))m$(( (SECONDS - start) % 60 ))s"
    for t in $SWEEP_SAMPLES; do
      progress="$BUILD/tests/$t.progress"
      if [ -s "$progress" ]; then
        line="$line; $t: $(tr -s ' ' <"$progress" | sed 's/^ //' | tail -n 1)"
      fi
    done
    echo "$line"
  done
}
heartbeat &
HEARTBEAT=$!
trap 'kill "$HEARTBEAT" 2>/dev/null || true' EXIT
rc=0
ctest --test-dir "$BUILD" -LE sweep_full --output-on-failure -j "$(nproc)" --timeout 3000 || rc=$?
kill "$HEARTBEAT" 2>/dev/null || true
wait "$HEARTBEAT" 2>/dev/null || true
exit "$rc"
