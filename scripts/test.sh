#!/usr/bin/env bash
# test.sh -- builds and runs the test suite: every CPU test (validation, generator, oracle, cache, tuner, fa-tune,
# Python package) and the NVRTC compile sweep over a covering sample of the kernel space (sm_80 and sm_90a, fails
# on any compile error or spill). GPU tests run too and skip with the reason when no GPU is found.
# The full kernel sweep is `ctest --test-dir build -L sweep_full`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${FA_BUILD_DIR:-$ROOT/build}"
export PATH="/usr/local/cuda/bin:$PATH"
cmake -G Ninja -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
ctest --test-dir "$BUILD" -LE sweep_full --output-on-failure -j "$(nproc)" --timeout 3000
