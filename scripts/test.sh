#!/usr/bin/env bash
# The test command: package in sync with the notebooks, notebooks clean, notebook tests, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
V=.venv/bin
snapshot() { (cd "$1" && find . -type f ! -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum); }
# unchanged DIR TOOL WHAT: run TOOL and fail with a clear message if it changes DIR
unchanged() {
  local before; before=$(snapshot "$1")
  "$V/$2"
  if [ "$before" != "$(snapshot "$1")" ]; then
    echo "FAIL: $2 changed $1/: $3"
    echo "      Run '.venv/bin/$2' and commit $1/."
    git status --porcelain -- "$1" 2>/dev/null || true
    exit 1
  fi
}
unchanged eagle3nb nbdev_export "the package is out of date with nbs/ (or was edited by hand; never edit eagle3nb/ directly)."
unchanged nbs nbdev_clean "notebooks were committed with output metadata or cell ids left in."
echo "== ruff check (one statement a line, lines of at most 120 characters; config in pyproject.toml) =="
$V/ruff check nbs eagle3nb tests bench scripts
echo "== the house: lessons after exports, names shown on their page, long prose (targets in the script) =="
$V/python scripts/house_measures.py --check
echo "== nbdev_test (default tier; add --flags slow for the slow tier) =="
$V/nbdev_test --n_workers 2 ${NBDEV_TEST_FLAGS:+--flags "$NBDEV_TEST_FLAGS"}
echo "== pytest tests/ =="
$V/python -m pytest tests/ -q -rs -m "not vllm and not speculators"
