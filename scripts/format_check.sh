#!/usr/bin/env bash
# format_check.sh -- the tree is formatted as .clang-format (C, C++, CUDA) and ruff.toml (Python) say: lists every
# file that a formatter would change, and ruff's lint findings; exit 1 if there is any. `--fix` rewrites instead.
# clang-format's output moves between major versions: the tree is kept with Debian 12's clang-format 14
# (scripts/setup.sh installs it); another major version is reported and not compared. ruff comes from PyPI.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
fix=0
[ "${1:-}" = --fix ] && fix=1
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t cfiles < <(git ls-files -- '*.c' '*.h' '*.cpp' '*.cu' '*.cuh' '*.inc')
else
  mapfile -t cfiles < <(find . -path ./build -prune -o -path './build-*' -prune -o -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.inc' \) -print)
fi
bad=0
if ! command -v clang-format >/dev/null; then
  echo "format_check: clang-format not found (scripts/setup.sh installs it)"
  bad=1
else
  major="$(clang-format --version | sed -n 's/.*version \([0-9]*\).*/\1/p')"
  if [ "$major" != 14 ]; then
    echo "format_check: clang-format $major is not the 14 the tree is kept with: C++ formatting not compared"
  elif [ $fix = 1 ]; then
    clang-format -i "${cfiles[@]}"
  else
    n=0
    for f in "${cfiles[@]}"; do
      if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
        echo "format_check: $f is not formatted (clang-format -i $f)"
        n=$((n + 1))
      fi
    done
    echo "format_check: ${#cfiles[@]} C/C++/CUDA files, $n not formatted"
    [ $n = 0 ] || bad=1
  fi
fi
if command -v ruff >/dev/null; then
  if [ $fix = 1 ]; then
    ruff format -q . && ruff check -q --fix .
  else
    ruff format --check . || bad=1
    ruff check . || bad=1
  fi
else
  echo "format_check: ruff not found (scripts/setup.sh installs it from PyPI): Python formatting not checked"
fi
exit $bad
