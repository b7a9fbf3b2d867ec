"""result_schema.py -- the one result layout every benchmark writes (bench/results/SCHEMA.md): the run's header
(benchmark, GPU, driver, peer versions, fa's commit, date, command line) and the benchmark's rows.

    import result_schema
    doc = result_schema.document("bench_peers", rows, args=vars(args))
    result_schema.write("bench/results/h200_bench_peers_bf16_fwd_tuned.json", doc)

fa's commit comes from $FA_BENCH_COMMIT, else `git` in this checkout (with "-dirty" when tracked files changed),
else the fa_commit.txt that scripts/build_for_device.sh writes into the build folder beside lib/, else "unknown".
Importing this module needs neither torch nor the library (summarize.py and the CPU tests read results with it).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

SCHEMA_VERSION = 1
REPO = Path(__file__).resolve().parents[1]

# field -> type; every result file holds these.
REQUIRED = {
    "schema_version": int,  # SCHEMA_VERSION
    "benchmark": str,  # the script or program: "bench_peers", "bench_decode", ...
    "gpu": str,  # "NVIDIA H200"
    "driver": str,  # NVIDIA driver version, "unknown" when nvidia-smi gives none
    "versions": dict,  # torch, cuda, cudnn, triton, python and any peer library found (flash_attn, ...)
    "fa_commit": str,  # the fa commit the run measured
    "date": str,  # YYYY-MM-DD
    "command": str,  # the command line, local paths reduced to their last component
    "rows": list,  # the measurements: a list of objects, fields per benchmark (SCHEMA.md)
}
# field -> type; present when they apply.
OPTIONAL = {
    "gpu_count": int,  # GPUs used together (default 1)
    "fa_commit_note": str,  # how fa_commit was found when not by git at run time ("reconstructed from git: ...")
    "env": dict,  # FA_* variables of the run (paths replaced by "(set)")
    "args": dict,  # the benchmark's parsed options
    "notes": str,  # what a reader must know to read the rows (printed under the summary table)
    "extra": dict,  # run-level figures that are not rows (e.g. the copy bandwidth)
}
PEER_MODULES = ("flash_attn", "flashinfer", "flash_mla", "xformers")
PATH_VARIABLES = ("FA_LIBRARY", "FA_CACHE_PATH")


def _run(cmd, cwd=None) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=cwd).stdout.strip()
    except Exception:  # noqa: BLE001 -- a missing tool gives ""
        return ""


def fa_commit() -> tuple[str, str | None]:
    """(commit, note): note is None when the commit came from git at run time."""
    if os.environ.get("FA_BENCH_COMMIT"):
        return os.environ["FA_BENCH_COMMIT"], "from $FA_BENCH_COMMIT"
    head = _run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO)
    if head:
        dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO)
        return head + ("-dirty" if dirty else ""), None
    lib = os.environ.get("FA_LIBRARY")
    if lib:
        stamp = Path(lib).resolve().parent.parent / "fa_commit.txt"
        if stamp.is_file():
            return stamp.read_text().strip(), f"from {stamp.parent.name}/fa_commit.txt (scripts/build_for_device.sh)"
    return "unknown", "no git checkout, no $FA_BENCH_COMMIT, no fa_commit.txt beside the library"


def versions() -> dict:
    out = {"python": platform.python_version()}
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = str(torch.version.cuda)
        out["cudnn"] = str(torch.backends.cudnn.version())
    except Exception:  # noqa: BLE001 -- no torch: the versions it knows are absent
        pass
    for name in ("triton",) + PEER_MODULES:
        try:
            module = __import__(name)
            out[name] = str(getattr(module, "__version__", "present"))
        except Exception:  # noqa: BLE001 -- not installed
            pass
    return out


def gpu_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name()
    except Exception:  # noqa: BLE001
        pass
    lines = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).splitlines()
    return lines[0] if lines else "unknown"


def driver_version() -> str:
    lines = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()
    return lines[0] if lines else "unknown"


def _short(arg: str) -> str:
    """A local path reduced to its last component (results carry no local build paths)."""
    if "=" in arg and arg.startswith("--"):
        key, value = arg.split("=", 1)
        return f"{key}={_short(value)}"
    return Path(arg).name if arg.startswith("/") else arg


def command_line(argv=None) -> str:
    argv = sys.argv if argv is None else argv
    script = Path(argv[0]).resolve()
    try:
        first = str(script.relative_to(REPO))
    except ValueError:
        first = script.name
    return shlex.join(["python3", first] + [_short(a) for a in argv[1:]])


def fa_env() -> dict:
    return {
        k: ("(set)" if k in PATH_VARIABLES else v)
        for k, v in sorted(os.environ.items())
        if k.startswith("FA_") and k != "FA_BENCH_COMMIT"
    }


def document(
    benchmark: str,
    rows: list,
    *,
    args: dict | None = None,
    notes: str | None = None,
    extra: dict | None = None,
    gpu_count: int = 1,
    argv=None,
) -> dict:
    """A result document of this run: the header fields, then `rows`."""
    commit, note = fa_commit()
    doc = {
        "schema_version": SCHEMA_VERSION,
        "benchmark": benchmark,
        "gpu": gpu_name(),
        "driver": driver_version(),
        "versions": versions(),
        "fa_commit": commit,
        "date": time.strftime("%Y-%m-%d"),
        "command": command_line(argv),
    }
    if note:
        doc["fa_commit_note"] = note
    if gpu_count != 1:
        doc["gpu_count"] = gpu_count
    doc["env"] = fa_env()
    if args is not None:
        doc["args"] = {k: (_short(v) if isinstance(v, str) else v) for k, v in args.items()}
    if notes:
        doc["notes"] = notes
    if extra:
        doc["extra"] = extra
    doc["rows"] = rows
    return doc


def validate(doc) -> list[str]:
    """What is wrong with doc as a result document ([]: nothing)."""
    if not isinstance(doc, dict):
        return ["not a JSON object"]
    problems = []
    for field, kind in REQUIRED.items():
        if field not in doc:
            problems.append(f"missing field {field!r}")
        elif not isinstance(doc[field], kind):
            problems.append(f"field {field!r}: expected {kind.__name__}, got {type(doc[field]).__name__}")
    for field, kind in OPTIONAL.items():
        if field in doc and not isinstance(doc[field], kind):
            problems.append(f"field {field!r}: expected {kind.__name__}, got {type(doc[field]).__name__}")
    for field in doc:
        if field not in REQUIRED and field not in OPTIONAL:
            problems.append(f"unknown field {field!r} (benchmark-specific data goes in rows or extra)")
    if doc.get("schema_version") not in (None, SCHEMA_VERSION):
        problems.append(f"schema_version: expected {SCHEMA_VERSION}, got {doc.get('schema_version')!r}")
    if isinstance(doc.get("rows"), list) and not all(isinstance(r, dict) for r in doc["rows"]):
        problems.append("rows: expected a list of objects")
    text = json.dumps(doc)
    for marker in ("/work/", "/root/", "/home/", "/tmp/"):
        if marker in text:
            problems.append(f"a local path ({marker}...) in the document")
    return problems


def write(path, doc) -> None:
    problems = validate(doc)
    if problems:
        raise ValueError(f"{path}: not a result document: " + "; ".join(problems))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")


def load(path) -> dict:
    doc = json.loads(Path(path).read_text())
    problems = validate(doc)
    if problems:
        raise ValueError(f"{path}: not a result document: " + "; ".join(problems))
    return doc
