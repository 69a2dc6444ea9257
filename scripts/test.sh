#!/usr/bin/env bash
# The test command: package in sync with the notebooks, notebooks clean, notebook tests, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
V=.venv/bin
snapshot() { (cd "$1" && find . -type f ! -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum); }
before=$(snapshot eagle3nb)
$V/nbdev_export
if [ "$before" != "$(snapshot eagle3nb)" ]; then
  echo "FAIL: nbdev_export changed eagle3nb/: the package is out of date with nbs/ (or was edited by hand)."
  echo "      Run '.venv/bin/nbdev_export' and commit eagle3nb/; never edit eagle3nb/ directly."
  git status --porcelain -- eagle3nb 2>/dev/null || true
  exit 1
fi
before=$(snapshot nbs)
$V/nbdev_clean
if [ "$before" != "$(snapshot nbs)" ]; then
  echo "FAIL: nbdev_clean changed nbs/: notebooks were committed with outputs metadata or cell ids left in."
  echo "      Run '.venv/bin/nbdev_clean' and commit nbs/."
  git status --porcelain -- nbs 2>/dev/null || true
  exit 1
fi
echo "== nbdev_test (default tier; add --flags slow for the slow tier) =="
$V/nbdev_test --n_workers 2 ${NBDEV_TEST_FLAGS:+--flags "$NBDEV_TEST_FLAGS"}
echo "== pytest tests/ =="
$V/python -m pytest tests/ -q -rs -m "not vllm"
