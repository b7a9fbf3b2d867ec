#!/usr/bin/env bash
# sass_diff.sh BEFORE_DIR AFTER_DIR [-v] -- compares the machine code of two builds' kernels, cubin by cubin (the
# files `fa_compile_sweep --dump-cubins DIR` writes, one per canonical key), e.g. a template refactor against main:
#   build-main/tests/fa_compile_sweep --sample --family fwd_wgmma --dump-cubins /tmp/a
#   build/tests/fa_compile_sweep      --sample --family fwd_wgmma --dump-cubins /tmp/b
#   scripts/sass_diff.sh /tmp/a /tmp/b
# Per kernel, the first that holds:
#   identical      every instruction and its scheduling control bits (the cubin's code);
#   same code      the instructions match, control bits differ;
#   renamed        the instructions match once the registers of each file are renamed in order of first use (R, UR,
#                  P, UP, B; .reuse flags dropped): the same code, the same schedule, other register numbers;
#   registers      the instructions match once every register number is dropped: the same instructions in the same
#                  order, another register assignment (not a mere renaming: live ranges share registers otherwise);
#   differs        with the instruction counts, how many instruction lines differ once every register number is
#                  dropped (instructions moved or changed; 0: only the register assignment differs), the net change
#                  of each opcode's count (none: the same instructions, placed or registered otherwise), how many
#                  lines of the data path differ (datapath below: 0, the same wgmma, barrier, memory and float
#                  instructions in the same order), both builds' registers /
#                  stack (cuobjdump -res-usage); -v prints the diff (addresses and encodings stripped).
# Keys present on one side only are listed. Exit status 0 when no common kernel differs and none is on one side
# only, else 1. cuobjdump: $CUOBJDUMP, else the one on PATH, else /usr/local/cuda/bin/cuobjdump.
set -euo pipefail

usage() { echo "usage: $0 BEFORE_DIR AFTER_DIR [-v]" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
a=$1 b=$2 verbose=0
[[ ${3:-} == -v ]] && verbose=1
[[ -d $a ]] || { echo "sass_diff: BEFORE_DIR '$a' is not a directory" >&2; exit 2; }
[[ -d $b ]] || { echo "sass_diff: AFTER_DIR '$b' is not a directory" >&2; exit 2; }
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)}
[[ -x $cuobjdump ]] || { echo "sass_diff: cuobjdump not found (set CUOBJDUMP)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The instruction lines of a cubin: "/*addr*/ INSTR ; /* enc */" then "/* ctrl */"; kept: INSTR (code) and, for the
# strict comparison, INSTR plus both encoding words (full).
disasm() {  # cubin code_out full_out
  "$cuobjdump" -sass "$1" | awk -v code="$2" -v full="$3" '
    /^[ \t]*\/\*[0-9a-f]+\*\// {
      line = $0; sub(/^[ \t]*\/\*[0-9a-f]+\*\/[ \t]*/, "", line)
      enc = line; sub(/^.*\/\* */, "", enc); sub(/ *\*\/.*$/, "", enc)
      sub(/[ \t]*\/\*.*$/, "", line); gsub(/[ \t]+/, " ", line)
      print line > code; pending = line " " enc; next
    }
    /^[ \t]*\/\* 0x[0-9a-f]+ \*\/[ \t]*$/ && pending != "" {
      enc = $0; gsub(/[ \t\/*]/, "", enc); print pending " " enc > full; pending = ""
    }'
}
# The code lines with registers renamed per class in order of first use (RZ, URZ, PT, UPT kept).
canon() {
  sed -E 's/\.reuse//g' "$1" | awk '{
    out = ""; line = $0
    while (match(line, /(^|[^A-Za-z0-9_.])(UR|UP|R|P|B)[0-9]+/)) {
      pre = substr(line, 1, RSTART - 1); tok = substr(line, RSTART, RLENGTH)
      lead = ""; if (tok !~ /^(UR|UP|R|P|B)/) { lead = substr(tok, 1, 1); tok = substr(tok, 2) }
      cls = tok; sub(/[0-9]+$/, "", cls)
      if (!((cls, tok) in name)) name[cls, tok] = cls "#" (++count[cls])
      out = out pre lead name[cls, tok]; line = substr(line, RSTART + RLENGTH)
    }
    print out line
  }'
}
# The code lines with every register number dropped (R12 -> R, UR4 -> UR, P0 -> P, .reuse dropped).
strip_regs() { sed -E 's/\.reuse//g; s/(^|[^A-Za-z0-9_.])(UR|UP|R|P|B)[0-9]+/\1\2/g' "$1"; }
# The net change of each opcode's count (modifiers kept, predicate and ';' dropped) from file a to file b, e.g.
# " +2 IMAD -1 IADD3"; empty when the two hold the same opcodes.
opcode_delta() {
  awk 'FNR == 1 { f++ } { sub(/^@!?U?P[0-9T]+ /, ""); op = $1; sub(/;$/, "", op); n[op] += f == 1 ? -1 : 1 }
       END { for (op in n) if (n[op] != 0) printf " %+d %s", n[op], op }' "$1" "$2"
}
# The data path in program order: the opcodes (with modifiers) of everything but integer, uniform-datapath, move,
# predicate and branch instructions (wgmma, warpgroup fences, mbarriers, named barriers, TMA, loads and stores,
# shuffles, float math): where two builds agree on it, they differ only in address and bookkeeping arithmetic.
datapath() {
  local bookkeeping='^(U|I[A-Z]|LOP3|SHF|LEA|MOV|PLOP3|SEL|VIADD|R2UR|S2R|S2UR|CS2R|LDC|NOP|BRA|BSSY|BSYNC|P2R|R2P)'
  sed -E 's/^@!?U?P[0-9T]+ //' "$1" | awk -v skip="$bookkeeping" '{ op = $1; sub(/;$/, "", op) } op !~ skip { print op }'
}
res() { "$cuobjdump" -res-usage "$1" | grep -o 'REG:[0-9]* STACK:[0-9]*' | head -1; }

identical=0 same=0 renamed=0 regs=0 differ=0 only=0
for fa in "$a"/*.cubin; do
  [[ -e $fa ]] || continue
  name=$(basename "$fa")
  fb=$b/$name
  if [[ ! -e $fb ]]; then echo "only in BEFORE: $name"; only=$((only + 1)); continue; fi
  disasm "$fa" "$tmp/a.code" "$tmp/a.full"
  disasm "$fb" "$tmp/b.code" "$tmp/b.full"
  if cmp -s "$tmp/a.full" "$tmp/b.full"; then
    identical=$((identical + 1))
  elif cmp -s "$tmp/a.code" "$tmp/b.code"; then
    same=$((same + 1))
    echo "same code, other control bits: $name"
  elif cmp -s <(canon "$tmp/a.code") <(canon "$tmp/b.code"); then
    renamed=$((renamed + 1))
    echo "renamed registers: $name"
  elif cmp -s <(strip_regs "$tmp/a.code") <(strip_regs "$tmp/b.code"); then
    regs=$((regs + 1))
    echo "other register assignment: $name (before $(res "$fa"), after $(res "$fb"))"
  else
    differ=$((differ + 1))
    moved=$(diff <(strip_regs "$tmp/a.code") <(strip_regs "$tmp/b.code") | grep -c '^[<>]' || true)
    mix=$(opcode_delta "$tmp/a.code" "$tmp/b.code")
    dp=$(diff <(datapath "$tmp/a.code") <(datapath "$tmp/b.code") | grep -c '^[<>]' || true)
    echo "differs: $name ($(wc -l <"$tmp/a.code") -> $(wc -l <"$tmp/b.code") instructions, $moved lines differ" \
         "without register numbers, $dp in the data path, opcode counts${mix:- the same};" \
         "before $(res "$fa"), after $(res "$fb"))"
    [[ $verbose == 1 ]] && diff "$tmp/a.code" "$tmp/b.code" | head -200 || true
  fi
done
for fb in "$b"/*.cubin; do
  [[ -e $fb ]] || continue
  [[ -e $a/$(basename "$fb") ]] || { echo "only in AFTER: $(basename "$fb")"; only=$((only + 1)); }
done
echo "sass_diff: $identical identical, $same same code (control bits differ), $renamed renamed registers," \
     "$regs other register assignment, $differ differ, $only on one side only"
[[ $differ == 0 && $only == 0 ]]
