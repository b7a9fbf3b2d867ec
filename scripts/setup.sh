#!/usr/bin/env bash
# setup.sh -- installs the build and test dependencies from Debian's packages (and pytest and flit_core, the Python
# package's build backend, from PyPI when the python3 on PATH is not Debian's; ruff, the Python formatter, from PyPI). Needs root or sudo; skips what is
# already there.
set -euo pipefail
need=()
for pkg in cmake ninja-build g++ libfmt-dev libsqlite3-dev libgtest-dev clang-format; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! python3 -c "import pytest" 2>/dev/null; then
  echo "setup: installing pytest"
  python3 -m pip install -q pytest 2>/dev/null || { $SUDO apt-get install -y -qq python3-pytest >/dev/null; }
fi
if ! python3 -c "import flit_core" 2>/dev/null; then  # python/tests/test_packaging.py builds the package with it
  echo "setup: installing flit_core"
  python3 -m pip install -q flit_core 2>/dev/null || $SUDO apt-get install -y -qq flit >/dev/null ||
    echo "setup: flit_core could not be installed (python/tests/test_packaging.py skips its pip test)"
fi
if ! command -v ruff >/dev/null; then  # scripts/format_check.sh (ctest format_check) formats Python with it
  echo "setup: installing ruff"
  python3 -m pip install -q ruff 2>/dev/null || echo "setup: ruff could not be installed (format_check skips Python)"
fi
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: the CUDA toolkit (NVRTC) is required: install it (e.g. Debian's nvidia-cuda-toolkit or NVIDIA's packages)" >&2
  exit 1
fi
