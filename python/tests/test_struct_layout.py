"""The ctypes mirrors have the size and field offsets the C compiler gives the structs of include/fa/fa.h."""

import ctypes
import shutil
import subprocess

import pytest

from conftest import HEADER
from fa import structs as S

CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")

STRUCTS = [
    ("fa_context_options", S.ContextOptions),
    ("fa_params", S.Params),
    ("fa_bwd_params", S.BwdParams),
    ("fa_user_buffer", S.UserBuffer),
    ("fa_mods", S.Mods),
    ("fa_merge_params", S.MergeParams),
]


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    if CC is None or not HEADER.is_file():
        pytest.skip("no C compiler or no include/fa/fa.h")
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "fa/fa.h"', "int main(void) {"]
    for cname, ctype in STRUCTS:
        lines.append(f'  printf("{cname} sizeof %zu\\n", sizeof({cname}));')
        for field, _ in ctype._fields_:
            lines.append(f'  printf("{cname} {field} %zu\\n", offsetof({cname}, {field}));')
    lines += ["  return 0;", "}"]
    work = tmp_path_factory.mktemp("layout")
    src, exe = work / "layout.c", work / "layout"
    src.write_text("\n".join(lines) + "\n")
    build = subprocess.run(
        [CC, "-std=c11", f"-I{HEADER.parent.parent}", str(src), "-o", str(exe)], capture_output=True, text=True
    )
    assert build.returncode == 0, f"a ctypes field name is missing from fa.h:\n{build.stderr}"
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    table = {}
    for line in out.splitlines():
        cname, field, value = line.split()
        table[(cname, field)] = int(value)
    return table


@pytest.mark.parametrize("cname,ctype", STRUCTS, ids=[c for c, _ in STRUCTS])
def test_sizes_and_offsets_match_c(c_layout, cname, ctype):
    assert ctypes.sizeof(ctype) == c_layout[(cname, "sizeof")]
    for field, _ in ctype._fields_:
        assert getattr(ctype, field).offset == c_layout[(cname, field)], f"{cname}.{field}"


def test_field_order_follows_header():
    """Every field name appears in fa.h, in the order the ctypes struct lists it."""
    if not HEADER.is_file():
        pytest.skip("no include/fa/fa.h")
    text = HEADER.read_text()
    for cname, ctype in STRUCTS:
        body = text[text.index(f"typedef struct {cname}") :]
        body = body[: body.index(f"}} {cname};")]
        last = -1
        for field, _ in ctype._fields_:
            import re

            m = re.search(rf"\b{field}\b", body[last + 1 :])
            assert m is not None, f"{cname}.{field} not found after the previous field"
            last = last + 1 + m.start()
