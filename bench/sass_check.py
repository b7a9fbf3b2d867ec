#!/usr/bin/env python3
"""sass_check.py -- disassembles the cubins a fa cache holds and counts what matters on Hopper.

    python3 bench/sass_check.py CACHE.sqlite [KEY_SUBSTRING ...]

For every cubin whose compile key contains one of the substrings (all when none are given) it runs
`cuobjdump -sass` and prints: GMMA instructions (the wgmma tensor-core path: HGMMA for 16-bit operands, QGMMA for
fp8), LDL/STL (local memory: spills or stack arrays), BAR/SYNCS counts, and the key. The last line counts kernels
without GMMA among those whose key names a Hopper family, and kernels with local-memory traffic. Needs cuobjdump on
PATH (the CUDA toolkit).
"""

import os
import re
import sqlite3
import subprocess
import sys
import tempfile

HOPPER_FAMILIES = ("fwd_wgmma", "fwd_mla", "bwd_wgmma")  # the families whose kernels must run on HGMMA


def main(db, subs):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute("SELECT compile_key, cubin FROM cubins").fetchall()
    no_hgmma = local = n = 0
    with tempfile.TemporaryDirectory() as tmp:
        for key, blob in rows:
            if subs and not any(s in key for s in subs):
                continue
            path = os.path.join(tmp, "k.cubin")
            with open(path, "wb") as f:
                f.write(blob)
            sass = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True).stdout
            hg = len(re.findall(r"\b[HQ]GMMA\b", sass))
            ld = len(re.findall(r"\b(LDL|STL)\b", sass))
            syncs = len(re.findall(r"\bSYNCS\b", sass))
            n += 1
            no_hgmma += hg == 0 and key.startswith(HOPPER_FAMILIES)
            local += ld > 0
            print(f"GMMA {hg:4d}  LDL/STL {ld:3d}  SYNCS {syncs:3d}  {key}")
    print(f"SASS SUMMARY: {n} kernels, {no_hgmma} Hopper-family kernels without GMMA, {local} with local memory")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
