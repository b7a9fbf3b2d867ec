#!/usr/bin/env bash
# device_run.sh -- everything one call on the device machine runs, with a prebuilt build-dev/
# (scripts/build_for_device.sh): the GPU suite (tests, example, Python tests), the tuning figures, fa-tune on two
# presets, then the benchmark against PyTorch's attention backends. Output under $OUT; a summary prints last.
# Knobs: SKIP_SUITE, SKIP_TOOLS (figures, fa-tune), SKIP_BENCH, SKIP_PYTHON, GTEST_FILTER, BENCH_ARGS (appended: later flags
# win), BENCH_CONTENDERS, *_TIMEOUT.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu_suite_out}"
B="$ROOT/build-dev"
mkdir -p "$OUT"
export OUT
LIB="$(ls "$B"/lib/libfa.so* | head -1)"
t0=$(date +%s)
lap() { echo "[device_run] $1 done at +$(( $(date +%s) - t0 ))s"; }

if [ "${SKIP_SUITE:-0}" != 1 ]; then
  FA_TUNE_POLICY=defaults timeout "${SUITE_TIMEOUT:-200}" "$ROOT/scripts/gpu_suite.sh" --build "$B" --no-bench > "$OUT/suite_stdout.log" 2>&1
  lap suite
  if [ "${SKIP_TOOLS:-0}" != 1 ] && [ -x "$B/bin/fa_tuning_figures" ]; then
    rm -f "$OUT"/figures.sqlite*
    timeout "${FIGURES_TIMEOUT:-120}" "$B/bin/fa_tuning_figures" --cache "$OUT/figures.sqlite" > "$OUT/figures.log" 2>&1
    echo "figures rc $?" >> "$OUT/figures.log"
    rm -f "$OUT"/figures.sqlite*
    lap figures
  fi
  if [ "${SKIP_TOOLS:-0}" != 1 ] && [ -x "$B/bin/fa-tune" ]; then
    rm -f /tmp/fa_tune_presets.sqlite*
    for preset in ci llama3-8b; do
      FA_TUNE_BUDGET_MS=1000 timeout "${TUNE_TIMEOUT:-80}" "$B/bin/fa-tune" --preset "$preset" --cache /tmp/fa_tune_presets.sqlite >> "$OUT/fa_tune.log" 2>&1
      echo "fa-tune --preset $preset rc $?" >> "$OUT/fa_tune.log"
    done
    lap fa-tune
  fi
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  mkdir -p "$OUT/bench"
  FA_LIBRARY="$LIB" PYTHONPATH="$ROOT/python" timeout "${BENCH_TIMEOUT:-300}" python3 "$ROOT/bench/bench_peers.py" \
    --contenders "${BENCH_CONTENDERS:-fa,FA2,cuDNN,efficient,flex}" --fa-tune defaults --iters "${BENCH_ITERS:-10}" \
    --warmup 3 --out "$OUT/bench" --json "$OUT/bench/bench.json" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
  echo "bench rc $?" >> "$OUT/bench.log"
  (cd "$OUT/bench" && tar -cf ../bench_png.tar *.png 2>/dev/null && rm -f *.png)
  lap bench
fi
echo "==================== DEVICE RUN SUMMARY ===================="
sed -n '/==== SUMMARY ====/,$p' "$OUT/suite_stdout.log" 2>/dev/null
grep -E "^\[[0-9]\]|PASS|FAIL|figures rc" "$OUT/figures.log" 2>/dev/null | head -30
grep -E "speedup|winner|rc [0-9]|x$" "$OUT/fa_tune.log" 2>/dev/null | tail -30
tail -3 "$OUT/bench.log" 2>/dev/null
