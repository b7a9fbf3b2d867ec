#!/usr/bin/env bash
# device_fwd_sweep.sh -- on the device machine, with a prebuilt build-dev/ (scripts/build_for_device.sh; carry it): issue
# 20's standard forward sweep tuned as a user tunes it, one dtype a call (each takes ~6-8 minutes on an H200): fa-tune over
# the sweep's keys (head dims 64 / 128 / 256 at hidden 2048, not causal and causal, 512-16k tokens a sequence, 16k a
# batch) into a fresh cache, then bench_peers.py over that cache (fa against FA2 and cuDNN, forward only, FA_TUNE_POLICY
# defaults: the tuned winners, nothing tuned during the timing), with the winners' table after the sweep's. TESTS=1
# runs forward GPU tests first (keep the call under 10 minutes: the fa-tune and bench steps take 6-8 of them). Output
# under $OUT (the table, the JSON, the fa-tune log); a summary prints last. SASS=1 then disassembles the tuned cache's
# fwd_wgmma cubins (bench/sass_check.py: HGMMA in each, no local memory; needs cuobjdump).
#   scripts/device_fwd_sweep.sh [bf16|fp16]     knobs: TESTS, GTEST_FILTER, BUDGET_MS (fa-tune, per key; 1000), ROUNDS (3),
#                                               CONTENDERS (fa,FA2,cuDNN), SASS, BUILD (build-dev: a build folder under the root)
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DT="${1:-bf16}"
OUT="${OUT:-$ROOT/gpu_suite_out}"
mkdir -p "$OUT"
B="$ROOT/${BUILD:-build-dev}"
LIB="$(ls "$B"/lib/libfa.so* | head -1)"
CACHE="/tmp/fa_fwd_sweep_$DT.sqlite"
rm -f "$CACHE"*
t0=$(date +%s)
lap() { echo "[device_fwd_sweep] $1 at +$(( $(date +%s) - t0 ))s"; }
if [ "${TESTS:-0}" = 1 ]; then
  FA_TUNE_POLICY=defaults FA_CACHE_PATH=/tmp/fa_fwd_tests.sqlite timeout 300 "$B/tests/fa_gpu_tests" \
    --gtest_filter="${GTEST_FILTER:-GpuForward.*:GpuUserMods.*:GpuBlockSparse.*}" > "$OUT/fwd_tests.log" 2>&1
  lap "tests rc $?"
fi
for D in 64 128 256; do
  timeout 170 "$B/bin/fa-tune" --dtypes "$DT" --head-dims "$D" --heads $((2048 / D)) --seqlens 512:16384 \
    --batch-tokens 16384 --masks none,causal --budget-ms "${BUDGET_MS:-1000}" --cache "$CACHE" >> "$OUT/fa_tune_$DT.log" 2>&1
  lap "fa-tune d $D rc $?"
done
FA_CACHE_PATH="$CACHE" FA_LIBRARY="$LIB" PYTHONPATH="$ROOT/python" timeout 300 python3 "$ROOT/bench/bench_peers.py" \
  --contenders "${CONTENDERS:-fa,FA2,cuDNN}" --dtypes "$DT" --hdims 64,128,256 --no-odd --no-decode --fwd-only --fa-tune defaults \
  --rounds "${ROUNDS:-3}" --iters 20 --out "$OUT/png" --json "$OUT/bench_peers_${DT}_fwd_tuned.json" \
  > "$OUT/bench_peers_${DT}_fwd_tuned.log" 2>&1
lap "bench rc $?"
rm -rf "$OUT/png"
{ echo; echo "## fa-tune winners"; grep -E "tuned \(verified|x  *[0-9]+/[0-9]+" "$OUT/fa_tune_$DT.log"; } \
  >> "$OUT/bench_peers_${DT}_fwd_tuned.log"
if [ "${SASS:-0}" = 1 ]; then
  python3 "$ROOT/bench/sass_check.py" "$CACHE" fwd_wgmma > "$OUT/sass_check_$DT.log" 2>&1
  lap "sass_check rc $?"
fi
echo "==================== FWD SWEEP SUMMARY ($DT) ===================="
grep -E "^\[  (FAILED|PASSED) |GPU SUMMARY" "$OUT/fwd_tests.log" 2>/dev/null
tail -1 "$OUT/sass_check_$DT.log" 2>/dev/null
grep -E "^\| standard" "$OUT/bench_peers_${DT}_fwd_tuned.log" | awk -F"|" "{print \$4, \$5, \$8, \"fa\", \$11, \"FA2\", \$12, \"cuDNN\", \$13, \"fa/cuDNN\", \$(NF-2)}"
