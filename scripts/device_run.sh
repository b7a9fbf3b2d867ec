#!/usr/bin/env bash
# device_run.sh -- what one call on the device machine runs: the GPU suite (tests, example, Python tests) with the
# prebuilt build-dev/, then the forward/backward benchmark against PyTorch SDPA backends. Output under $OUT.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_suite_out}"
mkdir -p "$OUT"
export OUT
python3 -c "import pytest" 2>/dev/null || pip install -q --no-index "$ROOT"/scratch/h5/wheels/*.whl 2>/dev/null
export FA_TUNE_POLICY="${FA_TUNE_POLICY:-defaults}"
timeout "${SUITE_TIMEOUT:-330}" "$ROOT/scripts/gpu_suite.sh" --build "$ROOT/build-dev" --no-bench
LIB="$(ls "$ROOT"/build-dev/lib/libfa.so* | head -1)"
FA_LIBRARY="$LIB" PYTHONPATH="$ROOT/python" timeout "${BENCH_TIMEOUT:-220}" python3 "$ROOT/bench/bench_peers.py" \
  --contenders "${BENCH_CONTENDERS:-fa,FA2,cuDNN}" --no-odd --no-decode --fa-tune defaults --iters 20 \
  --out "$OUT/bench" --json "$OUT/bench/bench.json" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
echo "bench rc $?"; tail -n 80 "$OUT/bench.log"
