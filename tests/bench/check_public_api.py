#!/usr/bin/env python3
"""check_public_api.py -- the benchmarks use fa's public API only: nothing under bench/ outside bench/probes/
includes a header of the library's internals or imports a private module of the Python package.

C/C++/CUDA sources may include system headers, "fa/fa.h" (or <fa/fa.h>) and at most one support header that lives in
bench/ itself; an include naming one of the library's source folders (runtime/, tuner/, generator/, api/, cache_db/,
templates/) is a violation, quoted or not. Python may import `fa` and its public names (fa.attention, fa.structs,
fa.mods, fa.ring, ...) but no `fa._name`. Before the tree, the checker runs itself over known good and bad lines, so a
rule that stops matching fails the test. Exit 1 with one line per violation.

  python3 tests/bench/check_public_api.py [--root REPO]
"""

import argparse
import re
import sys
from pathlib import Path

INTERNAL = ("runtime/", "tuner/", "generator/", "api/", "cache_db/", "templates/", "tests/")
C_EXT = {".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".cuh", ".inc"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
PY_PRIVATE = (
    re.compile(r"\bfa\._[A-Za-z]"),  # fa._lib, import fa._structs
    re.compile(r"^\s*from\s+fa\s+import\s+.*\b_[A-Za-z]"),
)  # from fa import _lib


def c_violation(line, support_headers):
    m = INCLUDE.match(line)
    if not m:
        return None
    kind, name = m.groups()
    if name == "fa/fa.h":
        return None
    if name.startswith(INTERNAL) or name.startswith("fa/"):
        return f"includes a non-public header {name}"
    if kind == '"' and name not in support_headers:
        return f'includes "{name}", neither fa/fa.h nor the support header in bench/'
    return None


def py_violation(line):
    code = line.split("#", 1)[0]
    for rule in PY_PRIVATE:
        if rule.search(code):
            return f"uses a private name of the Python package: {code.strip()}"
    return None


def self_test():
    support = {"bench_support.h"}
    good_c = [
        "#include <cstdio>",
        '#include "fa/fa.h"',
        "#include <fa/fa.h>",
        '#include "bench_support.h"',
        "// #include the fa header",
    ]
    bad_c = [
        '#include "runtime/context.h"',
        "#include <tuner/chooser.h>",
        '#include "api/backward_at.h"',
        '#include "other.h"',
        '  #  include "generator/family.h"',
        "#include <fa/internal.h>",
    ]
    good_py = [
        "import fa",
        "from fa import attention, structs",
        "x = fa.attention(q, k, v)",
        "fa.mods.document(d)",
        "import fa  # not fa._lib",
    ]
    bad_py = [
        "from fa import _lib",
        "from fa import attention, _structs as S",
        "import fa._torch_ops",
        "from fa._tensor_params import build_params",
        "t = fa._grad_step",
    ]
    wrong = [x for x in good_c if c_violation(x, support)] + [x for x in bad_c if not c_violation(x, support)]
    wrong += [x for x in good_py if py_violation(x)] + [x for x in bad_py if not py_violation(x)]
    return wrong


def check(root: Path):
    bench = root / "bench"
    files = [
        p
        for p in sorted(bench.rglob("*"))
        if p.is_file() and not {"probes", "__pycache__"} & set(p.relative_to(bench).parts)
    ]
    support = [p.name for p in files if p.suffix in {".h", ".hpp", ".cuh"}]
    problems = []
    if len(support) > 1:
        problems.append(f"bench/: {len(support)} support headers ({', '.join(support)}); at most one")
    for p in files:
        if p.suffix in C_EXT:
            rule = lambda line: c_violation(line, set(support))  # noqa: E731
        elif p.suffix == ".py":
            rule = py_violation
        else:
            continue
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            why = rule(line)
            if why:
                problems.append(f"{p.relative_to(root)}:{n}: {why}")
    return problems, len(files)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2]))
    args = ap.parse_args()
    wrong = self_test()
    if wrong:
        print("check_public_api: the rules misjudge: " + "; ".join(wrong), file=sys.stderr)
        return 1
    problems, n = check(Path(args.root))
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(
            f"check_public_api: {len(problems)} violation(s); measurement code that needs internals belongs in "
            "bench/probes/",
            file=sys.stderr,
        )
        return 1
    print(f"check_public_api: {n} files under bench/ (outside bench/probes/) use the public API only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
