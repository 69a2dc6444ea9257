#!/usr/bin/env bash
# Idempotent set-up of the `speculators` package (vLLM's reader of the speculators checkpoint format) in its
# OWN virtual environment, outside the repo: speculators==0.9.0 pins transformers<=5.19, older than the project's.
#   SPECULATORS_VENV  where the venv goes      (default: $HOME/.cache/eagle3nb/speculators-venv)
#   PYTHON            interpreter for the venv (default: python3)
# torch is pinned to the 2.13.0 CPU build first: a bare `torch` pulls a multi-GB CUDA build.
# Last line printed: the venv's python.
set -euo pipefail
SPECULATORS_VERSION=0.9.0
TORCH_VERSION=2.13.0
VENV=${SPECULATORS_VENV:-$HOME/.cache/eagle3nb/speculators-venv}
PY=${PYTHON:-python3}
VPY="$VENV/bin/python"
stamp="$VENV/.eagle3nb-speculators-setup"
want="speculators==$SPECULATORS_VERSION $(sha256sum "$0" | cut -d' ' -f1)"
if [ -x "$VPY" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "$VPY"
    exit 0
fi
echo "== eagle3nb: installing speculators==$SPECULATORS_VERSION into $VENV (CPU torch, a few minutes) ==" >&2
mkdir -p "$(dirname "$VENV")"
[ -x "$VPY" ] || "$PY" -m venv "$VENV"
rm -f "$stamp"
"$VPY" -m pip install -q --upgrade pip >&2
# the CPU build of torch: from a local wheel cache where the machine has one, else PyPI's CPU index
"$VPY" -m pip install -q "torch==$TORCH_VERSION+cpu" >&2 2>/dev/null \
  || "$VPY" -m pip install -q "torch==$TORCH_VERSION" --index-url https://download.pytorch.org/whl/cpu >&2
"$VPY" -m pip install -q "speculators==$SPECULATORS_VERSION" "torch==$TORCH_VERSION" >&2
# speculators drags in torchvision/torchaudio; their CUDA-built wheels break imports against CPU torch and nothing here needs them
"$VPY" -m pip uninstall -y -q torchvision torchaudio torchcodec >&2 2>/dev/null || true
"$VPY" -c "import importlib.metadata as md, torch, transformers; from speculators import SpeculatorModel; print('speculators', md.version('speculators'), 'torch', torch.__version__, 'transformers', transformers.__version__)" >&2
echo "$want" > "$stamp"
echo "== speculators set-up done ==" >&2
echo "$VPY"
