#!/usr/bin/env bash
# build_for_device.sh -- builds a Release tree in build-dev/ (SQLite and GoogleTest linked statically) that runs on
# the device machine, which lacks those development packages. Carry "build-dev" to it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cmake -G Ninja -S "$ROOT" -B "$ROOT/build-dev" -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$ROOT/build-dev" fa fa_gpu_tests fa_example_c fa-tune fa_tuning_figures
du -sh "$ROOT/build-dev"
