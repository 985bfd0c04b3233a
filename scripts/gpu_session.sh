#!/usr/bin/env bash
# Run ON a CUDA machine (the device tool: `bash scripts/gpu_session.sh`, carry [".gpu"], timeout_s 480):
# the full GPU validation with calibration for one preset model, in well under 8 minutes. Writes the
# report, its JSON and the calibration under $OUT (the device tool's folder) or results/, and prints the
# total runtime. Then, back here: `bash scripts/gpu_collect.sh FILES_AT` puts them into results/ and ships
# the calibration (python/kvsim/calibrations/). Needs .gpu/ from scripts/gpu_prepare.sh, unless kvsim
# is installed with its gpu extra already (then it is used as it is).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
PY=${PYTHON:-python3}
MODEL=${MODEL:-llama-3-8b}
out=${OUT:-results}
export PYTHONUNBUFFERED=1
if [[ -d .gpu ]]; then
    site=/tmp/kvsim-site
    "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" .gpu/whl/*.whl
    cp .gpu/_core.abi3.so python/kvsim/_core.abi3.so
    export PYTHONPATH="$site:$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$PY" -c "import torch, kvsim; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
echo "gpu_session: setup $((SECONDS - start)) s"
status=0
"$PY" -m kvsim.gpu.validate --device cuda --model "$MODEL" --out "$out" "$@" || status=$?
ls -l "$out" "$out/calibration"
echo "gpu_session: total $((SECONDS - start)) s (validation exit status $status)"
exit $status
