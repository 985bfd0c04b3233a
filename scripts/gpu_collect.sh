#!/usr/bin/env bash
# Run HERE after scripts/gpu_session.sh: copies the device's report, JSON and calibration from the folder
# the device tool returned (its files_at) into results/, and ships a CUDA calibration in the package
# (python/kvsim/calibrations/, listed by kvsim.sizing.calibrations()). Then commit them.
set -euo pipefail
src=${1:?usage: gpu_collect.sh FILES_AT}
cd "$(dirname "$0")/.."
cp "$src/gpu_validation.md" "$src/gpu_validation.json" results/
mkdir -p results/calibration python/kvsim/calibrations
for f in "$src"/calibration/*.json; do
    cp "$f" results/calibration/
    if grep -q '"device_kind": "cuda"' "$f"; then cp "$f" python/kvsim/calibrations/; fi
done
git status --short results python/kvsim/calibrations
