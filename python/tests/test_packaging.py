"""Installing the package (issue 40): `pip install ./python` writes nothing into the sources (no build/ or
fa.egg-info/ beside pyproject.toml), and an installed package looks for libfa.so only where an install puts it (no
build-tree paths relative to site-packages). Runs without torch, the library or a GPU."""

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR

PY = f"python{sys.version_info.major}.{sys.version_info.minor}"


def files_under(root) -> set:
    return {str(p.relative_to(root)) for p in root.rglob("*") if "__pycache__" not in p.parts}


def copy_sources(dst):
    shutil.copytree(
        PYTHON_DIR, dst, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "build", "*.egg-info")
    )
    return dst


def candidate_paths_of(site_packages, env_extra=None):
    code = "import fa\nfor p in fa.candidate_paths(): print(p)"
    env = {k: v for k, v in os.environ.items() if k not in ("FA_PREFIX", "FA_LIBRARY")}
    env.update(FA_NO_TORCH="1", PYTHONPATH=str(site_packages), **(env_extra or {}))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, cwd=site_packages
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_installed_package_lists_no_build_tree(tmp_path):
    """fa in <prefix>/lib/pythonX.Y/site-packages: next to the package, <prefix>/lib, and nothing under
    <prefix>/lib/pythonX.Y/build (the checkout's build tree exists only in the checkout)."""
    prefix = tmp_path / "prefix"
    site = prefix / "lib" / PY / "site-packages"
    shutil.copytree(PYTHON_DIR / "fa", site / "fa", ignore=shutil.ignore_patterns("__pycache__"))
    paths = candidate_paths_of(site)
    assert paths == [str(site / "fa" / "libfa.so"), str(site / "libfa.so"), str(prefix / "lib" / "libfa.so")]
    with_prefix = candidate_paths_of(site, {"FA_PREFIX": str(tmp_path / "p2")})
    assert str(tmp_path / "p2" / "lib" / "libfa.so") in with_prefix
    # every path inside the prefixes, none in a build/ folder there (tmp_path itself may lie in a build tree: ctest
    # points TMPDIR into it)
    inside = [os.path.relpath(p, tmp_path) for p in with_prefix]
    assert not any(r.startswith("..") or "build" in r.split(os.sep) for r in inside), with_prefix


def test_checkout_lists_its_build_tree():
    paths = candidate_paths_of(PYTHON_DIR)
    assert str(PYTHON_DIR.parent / "build" / "lib" / "libfa.so") in paths


def test_pip_install_leaves_the_sources_clean(tmp_path):
    """pip builds the wheel from a copy of python/ (in place, as pip does for a local folder) and installs it into
    a target folder: the copy holds the same files afterwards, and the target the package."""
    if importlib.util.find_spec("pip") is None:
        pytest.skip("pip is not installed")
    if importlib.util.find_spec("flit_core") is None:
        pytest.skip("flit_core (python/pyproject.toml's build backend) is not installed: scripts/setup.sh installs it")
    src = copy_sources(tmp_path / "src")
    before = files_under(src)
    target = tmp_path / "target"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PIP_NO_INPUT="1"),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert files_under(src) == before, f"pip wrote into the sources: {sorted(files_under(src) - before)}"
    installed = files_under(target / "fa")
    assert {"__init__.py", "shape_rules.py", "_lib.py"} <= installed
    assert not (target / "build").exists()
