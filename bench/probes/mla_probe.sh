#!/usr/bin/env bash
# mla_probe.sh -- where the time of the MLA decode kernel goes (docs/design_notes.md, "Measuring": leave one stage out).
# Builds bench/probes/mla_probe.cu with nvcc once per variant of templates/fwd_mla.cuh (a patched copy in a temporary
# folder that shadows the template) and times each on the same shapes; the difference to `full` is the stage's share.
#   full        the kernel as the library compiles it at its default knobs (no L2 prefetch)
#   l2_2        with the L2 prefetch two blocks ahead (kL2Ahead 2)
#   sets2       two accumulator sets for S (interleaved wgmma chains) instead of one
#   no_load     the producer issues no copies (stages hold stale data; barriers as usual)
#   no_sgemm    S = Q K^T not computed (scores 0)
#   no_ogemm    O += P V not computed
#   no_softmax  the exponentials replaced by the scores themselves (no MUFU work)
#   gemms_only  no copies and no exponentials: the two GEMMs, the barriers and the bookkeeping
#   seesaw      the seesaw schedule (knob sched 1, fwd_mla_seesaw.cuh) as the library compiles it
# Usage (on the GPU machine): bash bench/probes/mla_probe.sh [build|run|all] [OUTDIR]; needs nvcc and python3. Shapes:
# PROBE_SHAPES="BATCH:KEYS:SPLITS ..." (default: batch 32 x 32k keys / 2 splits, 128 x 32k / 1, 1 x 32k / 64).
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODE="${1:-all}"
OUTDIR="${2:-/tmp/mla_probe}"
mkdir -p "$OUTDIR"
SHAPES="${PROBE_SHAPES:-32:32768:2 128:32768:1 1:32768:64}"
VARIANTS="full l2_2 sets2 no_load no_sgemm no_ogemm no_softmax gemms_only seesaw"
if [ "$MODE" != run ]; then
python3 - "$ROOT/templates/fwd_mla.cuh" "$OUTDIR" <<'EOF'
import os, sys
src = open(sys.argv[1]).read()
out = sys.argv[2]
sgemm = """FaWg<kHalf>::ss<fa_cfg::kDtype>(sx[k4 % kSets], dqc + (unsigned)(k4 * 2), dkc + (unsigned)(k4 * 2),
                                        ch > 0 || k4 >= kSets ? 1 : 0);"""
ogemm = "FaWg<kCols>::ss_t<fa_cfg::kDtype>(o, dp0 + (unsigned)(kk * 2), dv0 + (vo >> 4), 1);"
load = "for (int ch = 0; ch < kDc; ++ch) cp_async16(dst + (unsigned)(ch * kChunk), src + ch * 64, ok ? 16 : 0);"
exp0 = "const float p0 = fa_exp2(fmaf(s[j * 4 + hh * 2], mul, -ms));"
exp1 = "const float p1 = fa_exp2(fmaf(s[j * 4 + hh * 2 + 1], mul, -ms));"
patches = {
    "full": [],
    "sets2": [("constexpr int kSets = 1;", "constexpr int kSets = 2;")],
    "no_load": [(load, "(void)dst; (void)src;")],
    "no_sgemm": [(sgemm, "if (ch == 0 && k4 < kSets) for (int z = 0; z < kHalf / 2; ++z) sx[k4][z] = 0.f;")],
    "no_ogemm": [(ogemm, "(void)vo;")],
    "no_softmax": [(exp0, "const float p0 = fmaf(s[j * 4 + hh * 2], mul, -ms);"),
                   (exp1, "const float p1 = fmaf(s[j * 4 + hh * 2 + 1], mul, -ms);")],
    "gemms_only": [(load, "(void)dst; (void)src;"), (exp0, "const float p0 = fmaf(s[j * 4 + hh * 2], mul, -ms);"),
                   (exp1, "const float p1 = fmaf(s[j * 4 + hh * 2 + 1], mul, -ms);")],
}
for name, reps in patches.items():
    t = src
    for a, b in reps:
        if a not in t:
            sys.exit(f"mla_probe: patch for {name} does not match the template: {a}")
        t = t.replace(a, b)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "fwd_mla.cuh"), "w").write(t)
EOF
[ $? -eq 0 ] || exit 1
build() {  # name l2 dir [sched]
  nvcc -O3 -std=c++17 --extra-device-vectorization -diag-suppress 177 -Xptxas -v -gencode=arch=compute_90a,code=sm_90a -DPROBE_NAME="\"$1\"" -DPROBE_L2="$2" -DPROBE_SCHED="${4:-0}" \
    -I"$OUTDIR/$3" -I"$ROOT/templates" "$ROOT/bench/probes/mla_probe.cu" -o "$OUTDIR/probe_$1" \
    > "$OUTDIR/build_$1.log" 2>&1 ||
    { echo "build $1 failed"; cat "$OUTDIR/build_$1.log" | head -20; }
}
build full 0 full &
build l2_2 2 full &
build seesaw 0 full 1 &
for v in sets2 no_load no_sgemm no_ogemm no_softmax gemms_only; do build "$v" 0 "$v" & done
wait
fi
[ "$MODE" = build ] && exit 0
for shape in $SHAPES; do
  IFS=: read -r b s n <<< "$shape"
  for v in $VARIANTS; do
    [ -x "$OUTDIR/probe_$v" ] && { timeout 20 "$OUTDIR/probe_$v" "$b" "$s" "$n" 20 || echo "PROBE $v rc $?"; }
  done
done | tee "$OUTDIR/probe.log"
