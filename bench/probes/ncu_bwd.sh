#!/usr/bin/env bash
# ncu_bwd.sh -- stall reasons, instruction and tensor-pipe figures of fa's backward kernel (bwd_mma) next to
# FlashAttention-2's (via SDPA) for one shape, from Nsight Compute; output under $OUT (or ./ncu_out).
#   bench/probes/ncu_bwd.sh [bwd_probe.py flags, e.g. --d 128 --seqlen 4096]
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-$ROOT/ncu_out}"
mkdir -p "$OUT"
export FA_LIBRARY="${FA_LIBRARY:-$(ls "$ROOT"/build-dev/lib/libfa.so.* | head -1)}" PYTHONPATH="$ROOT/python"
S=smsp__average_warps_issue_stalled_
M=""
for r in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait lg_throttle not_selected \
         selected dispatch_stall no_instruction membar branch_resolving tex_throttle drain misc sleeping; do
  M="$M,${S}${r}_per_issue_active.ratio"
done
M="${M#,},smsp__inst_executed.sum,smsp__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
M="$M,gpu__time_duration.sum,launch__registers_per_thread,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"
# fa: launches are fwd, bwd_pre, bwd_mma, bwd_post (--iters 0); FA2: its dq_dk_dv kernel.
timeout 200 ncu -k regex:fa_kernel --launch-skip 2 --launch-count 1 --metrics "$M" \
  python3 "$ROOT/bench/probes/bwd_probe.py" --iters 0 "$@" > "$OUT/ncu_fa.txt" 2>&1
timeout 200 ncu -k regex:flash_bwd_dq_dk_dv --launch-count 1 --metrics "$M" \
  python3 "$ROOT/bench/probes/bwd_probe.py" --iters 1 "$@" > "$OUT/ncu_fa2.txt" 2>&1
echo "metric fa FA2"
paste <(grep -E "^\s+(smsp|gpu|launch|l1tex)" "$OUT/ncu_fa.txt" | awk '{print $1, $NF}') \
      <(grep -E "^\s+(smsp|gpu|launch|l1tex)" "$OUT/ncu_fa2.txt" | awk '{print $NF}') |
  sed "s/${S}//; s/_per_issue_active.ratio//"
