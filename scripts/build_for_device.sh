#!/usr/bin/env bash
# build_for_device.sh -- builds a Release tree in build-dev/ (SQLite and GoogleTest linked statically) that runs on
# the device machine, which lacks those development packages, and build-dev/fa_commit.txt. Carry "build-dev" to it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cmake -G Ninja -S "$ROOT" -B "$ROOT/build-dev" -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$ROOT/build-dev" fa fa_gpu_tests fa_example_c fa-tune fa_tuning_figures
# The commit this build is of, for the benchmarks' result files (bench/result_schema.py) where no git checkout is.
commit="$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
if [ "$commit" != unknown ] && ! git -C "$ROOT" diff --quiet HEAD --; then commit="$commit-dirty"; fi
printf '%s\n' "$commit" > "$ROOT/build-dev/fa_commit.txt"
du -sh "$ROOT/build-dev"
