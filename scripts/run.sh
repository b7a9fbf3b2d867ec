#!/usr/bin/env bash
# run.sh -- sets up, builds and runs the main job. With a GPU: the GPU test suite and the benchmarks
# (scripts/gpu_suite.sh). Without one: says so plainly, then compiles the kernel space of the `ci` preset through
# NVRTC for sm_80 and sm_90a (fa-tune --dry-run) and runs the C example (which reports the missing GPU).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${FA_BUILD_DIR:-$ROOT/build}"
export PATH="/usr/local/cuda/bin:$PATH"
"$ROOT/scripts/setup.sh"
cmake -G Ninja -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  exec "$ROOT/scripts/gpu_suite.sh" --build "$BUILD" "$@"
fi
echo "run: no GPU found on this machine: compiling the kernel space instead (nothing is launched)"
"$BUILD/tests/fa_example_c" || true
if [ -x "$BUILD/bin/fa-tune" ]; then
  "$BUILD/bin/fa-tune" --preset ci --dry-run --arch 90
  "$BUILD/bin/fa-tune" --preset ci --dry-run --arch 80
else
  "$BUILD/tests/fa_compile_sweep" --sample
fi
