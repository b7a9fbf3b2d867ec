#!/usr/bin/env bash
# device_ab.sh -- on the device machine, in one call: the GPU suite of build-dev/ (B), then the same bench_peers.py
# cells for two builds of libfa, A (build-base/, e.g. the commit before a refactor) and B (build-dev/), alternating
# A B A B, and bench/ab_compare.py's table of fa/FA2 per run and B/A per cell. For "same results, same speed" checks
# of a change that must not move anything. Work files under $ROOT/gpu_suite_out; what comes back (the suite's
# summary, the runs' JSON, the table: 6 files with two pairs) under $OUT; a summary prints last.
# Knobs: SKIP_SUITE, AB_ARGS (bench_peers.py flags), AB_PAIRS (default 2), SUITE_TIMEOUT, AB_TIMEOUT (per run).
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RESULTS="${OUT:-$ROOT/gpu_suite_out}"
OUT="$ROOT/gpu_suite_out"
mkdir -p "$OUT" "$RESULTS"
export OUT
LIB_A="$(ls "$ROOT"/build-base/lib/libfa.so* | head -1)"
LIB_B="$(ls "$ROOT"/build-dev/lib/libfa.so* | head -1)"
ARGS="${AB_ARGS:---dtypes bf16 --hdims 64,128 --no-odd --no-decode --contenders fa,FA2 --fa-tune defaults --iters 20 --rounds 4}"
if [ "${SKIP_SUITE:-0}" != 1 ]; then
  FA_TUNE_POLICY=defaults timeout "${SUITE_TIMEOUT:-300}" "$ROOT/scripts/gpu_suite.sh" --build "$ROOT/build-dev" --no-bench \
    > "$OUT/suite_stdout.log" 2>&1
  echo "suite rc $?" >> "$OUT/suite_stdout.log"
fi
runs=()
for i in $(seq 1 "${AB_PAIRS:-2}"); do
  for side in A B; do
    lib=$LIB_A; [ $side = B ] && lib=$LIB_B
    rm -f /tmp/fa_ab.sqlite*
    FA_CACHE_PATH=/tmp/fa_ab.sqlite FA_LIBRARY="$lib" PYTHONPATH="$ROOT/python" timeout "${AB_TIMEOUT:-240}" \
      python3 "$ROOT/bench/bench_peers.py" $ARGS --out "$OUT/ab_png" --json "$OUT/ab_${side}${i}.json" \
      > "$OUT/ab_${side}${i}.log" 2>&1
    echo "[device_ab] $side$i rc $?"
    runs+=("$OUT/ab_${side}${i}.json")
  done
done
rm -rf "$OUT/ab_png"
python3 "$ROOT/bench/ab_compare.py" "${runs[@]}" > "$OUT/ab_table.md" 2>&1
if [ "$RESULTS" != "$OUT" ]; then cp "$OUT/suite_stdout.log" "$OUT/ab_table.md" "${runs[@]}" "$RESULTS/" 2>/dev/null; fi
echo "==================== DEVICE A/B SUMMARY ===================="
sed -n '/==== SUMMARY ====/,$p' "$OUT/suite_stdout.log" 2>/dev/null
tail -1 "$OUT/suite_stdout.log" 2>/dev/null
tail -1 "$OUT/ab_table.md"
