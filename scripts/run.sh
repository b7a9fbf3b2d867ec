#!/usr/bin/env bash
# run.sh -- sets up, builds and runs the main job. With a GPU: the GPU test suite and the benchmarks
# (scripts/gpu_suite.sh). Without one: says so plainly, runs the C example (which reports the missing GPU), then
# compiles the candidate kernels of fa-tune's `ci` preset (fp16, head dim 64, 4 heads, masks none and causal, length
# 256) through NVRTC for sm_90 and sm_80 (fa-tune --dry-run), into the cache file it names: $FA_CACHE_PATH when set,
# else run_cache.sqlite in the build folder (never ~/.cache/fa). A second run loads them from that file.
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
CACHE="${FA_CACHE_PATH:-$BUILD/run_cache.sqlite}"
export FA_CACHE_PATH="$CACHE"  # the example's context and fa-tune both use this file
echo "run: no GPU found on this machine: no kernel can run here."
echo "run: instead: the C example (it reports the missing GPU), then the candidate kernels of fa-tune's 'ci' preset"
echo "run: (fp16, head dim 64, 4 heads, masks none and causal, length 256) compiled through NVRTC for sm_90 and sm_80,"
echo "run: and kept in the cache file $CACHE"
"$BUILD/tests/fa_example_c" || true
if [ -x "$BUILD/bin/fa-tune" ]; then
  "$BUILD/bin/fa-tune" --preset ci --dry-run --arch 90 --cache "$CACHE"
  "$BUILD/bin/fa-tune" --preset ci --dry-run --arch 80 --cache "$CACHE"
  size="$(awk -v b="$(stat -c %s "$CACHE")" 'BEGIN { printf "%.1f MB", b / 1e6 }')"
  echo "run: done: the compiled kernels are in $CACHE ($size); a second run loads them from it"
  echo "run: (fa-tune --prune --cache FILE drops those of older builds; deleting it makes the next run compile again)"
else
  echo "run: fa-tune was not built: compiling the NVRTC sweep sample of every kernel family instead"
  "$BUILD/tests/fa_compile_sweep" --sample
fi
