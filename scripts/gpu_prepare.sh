#!/usr/bin/env bash
# Run HERE (no GPU needed), before a session's device call: fills .gpu/ (git-ignored) with what
# scripts/gpu_session.sh needs on a device machine that reaches no registry. Its image has python3 (3.12)
# with torch, numpy and tqdm but neither polars nor kvsim's Rust extension, so this builds the extension
# for the stable ABI (abi3, CPython >= 3.11) and downloads polars' wheels for CPython 3.12. ~45 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
VENV=${VENV:-.venv}
rm -rf .gpu && mkdir -p .gpu/whl .gpu/build
PYO3_PYTHON="$PWD/$VENV/bin/python" "$VENV/bin/maturin" build --release --features pyo3/abi3-py311 -o .gpu/build -q
unzip -q -o -j .gpu/build/kvsim-*.whl 'kvsim/_core.abi3.so' -d .gpu
rm -rf .gpu/build
version=$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('polars'))")
pkgs=("polars==$version")
"$VENV/bin/python" -c "import importlib.metadata as m; m.version('polars-runtime-32')" 2>/dev/null \
    && pkgs+=("polars-runtime-32==$version")
"$VENV/bin/python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .gpu/whl "${pkgs[@]}"
du -sh .gpu
echo "gpu_prepare: $((SECONDS - start)) s; now run scripts/gpu_session.sh on the device with carry ['.gpu']"
