#!/usr/bin/env bash
# device_multi_gpu.sh -- issue 23 on a machine with several GPUs (nvidia-h200-x2 / -x4), with a prebuilt build folder
# (scripts/build_for_device.sh; carry it): fa-tune --devices all against one GPU on the same grid (a fresh cache
# each; goal: the GPUs' wall time within 15% of one GPU's / GPU count), then bench/ring_scale.py (fa.ring over NCCL
# against single-GPU fa: agreement, then scaling efficiency at long totals; goal >= 0.85 at 4 GPUs). NVLink
# multicast stays off (the device image's NCCL_NVLS_ENABLE=0 and friends, set again here). Output under $OUT; a
# summary prints last. Session 20 ran these steps by hand as calls 7-8, before this file (docs/design_notes.md, "Several
# GPUs").
#   scripts/device_multi_gpu.sh      knobs: BUILD (build-dev), GRID (fa-tune grid flags), WORLDS (2,4),
#                                    TOKENS (131072,524288), ITERS (2)
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_suite_out}"
mkdir -p "$OUT"
rm -f "$OUT/multi_gpu_summary.log"
B="$ROOT/${BUILD:-build-dev}"
LIB="$(ls "$B"/lib/libfa.so* | head -1)"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
GRID="${GRID:---preset llama3-8b --seqlens 512:16384 --masks none,causal}"
t0=$(date +%s)
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
for D in 0 all; do
  rm -f "/tmp/fa_multi_$D.sqlite"*
  s=$(date +%s%N)
  # shellcheck disable=SC2086
  timeout 200 "$B/bin/fa-tune" $GRID --budget-ms 1000 --devices "$D" --cache "/tmp/fa_multi_$D.sqlite" \
    --json "$OUT/fa_tune_devices_$D.json" --no-progress > "$OUT/fa_tune_devices_$D.log" 2>&1
  echo "fa-tune --devices $D rc $? wall $(( ($(date +%s%N) - s) / 1000000 )) ms" | tee -a "$OUT/multi_gpu_summary.log"
  grep -E "problems on|compiled the grid" "$OUT/fa_tune_devices_$D.log" | tee -a "$OUT/multi_gpu_summary.log"
done
FA_TUNE_POLICY=defaults FA_CACHE_PATH=/tmp/fa_ring.sqlite FA_LIBRARY="$LIB" PYTHONPATH="$ROOT/python" timeout 300 \
  python3 "$ROOT/bench/ring_scale.py" --worlds "${WORLDS:-2,4}" --check-tokens 16384 --tokens "${TOKENS:-131072,524288}" \
  --iters "${ITERS:-2}" --json "$OUT/ring_scale.json" > "$OUT/ring_scale.log" 2>&1
echo "ring_scale rc $? at +$(( $(date +%s) - t0 ))s"
echo "==================== MULTI-GPU SUMMARY ===================="
cat "$OUT/multi_gpu_summary.log"
grep -E "^\| [0-9]|RING SUMMARY|FAIL" "$OUT/ring_scale.log"
