#!/usr/bin/env bash
# ncu_source.sh -- Nsight Compute full-set profiles of fa's forward and backward kernels next to FlashAttention-2's
# (through SDPA) for one shape (bench/probes/bwd_probe.py flags), each as a details page and a per-SASS-instruction
# source page (stall samples, shared-memory wavefronts and excess wavefronts per instruction) in CSV, packed into
# $OUT/ncu_source.tgz; a few headline metrics print last. Kernels: fa fwd, FA2 fwd, fa bwd_mma, FA2 dq_dk_dv.
#   bench/probes/ncu_source.sh [--d 128 --seqlen 4096 --causal ...]
# Environment: NCU_ONLY (space-separated subset of fa_fwd fa2_fwd fa_bwd fa2_bwd), NCU_TAG (file-name prefix).
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-$ROOT/ncu_out}"
TAG="${NCU_TAG:-p}"
W="$(mktemp -d)"
mkdir -p "$OUT"
export FA_LIBRARY="${FA_LIBRARY:-$(ls "$ROOT"/build-dev/lib/libfa.so.* | head -1)}" PYTHONPATH="$ROOT/python"
ONLY="${NCU_ONLY:-fa_fwd fa2_fwd fa_bwd fa2_bwd}"

# name, kernel regex, launches to skip, bwd_probe --iters (0: exactly one fa fwd + bwd; 1: also SDPA's)
prof() {
  local name="$1" regex="$2" skip="$3" iters="$4"
  shift 4
  case " $ONLY " in *" $name "*) ;; *) return ;; esac
  timeout 300 ncu --set full --import-source no -k "regex:$regex" --launch-skip "$skip" --launch-count 1 -f \
    -o "$W/$TAG.$name" python3 "$ROOT/bench/probes/bwd_probe.py" --iters "$iters" "$@" > "$W/$TAG.$name.log" 2>&1
  ncu --import "$W/$TAG.$name.ncu-rep" --page details > "$W/$TAG.$name.details.txt" 2>&1
  ncu --import "$W/$TAG.$name.ncu-rep" --page source --csv --print-source sass > "$W/$TAG.$name.sass.csv" 2>&1
  echo "== $name: $(grep -E '^\s+Duration' "$W/$TAG.$name.details.txt" | head -1 | awk '{print $NF, $(NF-1)}')"
}
prof fa_fwd fa_kernel 0 0 "$@"
prof fa2_fwd flash_fwd_kernel 0 1 "$@"
prof fa_bwd fa_kernel 2 0 "$@"
prof fa2_bwd flash_bwd_dq_dk_dv 0 1 "$@"
rm -f "$W"/*.ncu-rep
tar -czf "$OUT/${TAG}_ncu_source.tgz" -C "$W" .
for f in "$W"/*.details.txt; do
  echo "---- $(basename "$f" .details.txt)"
  grep -E "^\s+(Duration|Registers Per Thread|Achieved Occupancy|Executed Instructions |Issue Slots Busy|Compute \(SM\) Throughput|Shared Memory Configuration Size)" "$f" | head -8
done
