#!/usr/bin/env bash
# The test command: package in sync with the notebooks, notebooks clean, notebook tests, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${EAGLE3NB_IN_TMP:-}" ] || EAGLE3NB_IN_TMP=1 exec bash scripts/in_tmp.sh bash "$0" "$@"   # its own TMPDIR
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
# One thread a process: two workers share the two cores, and a tiny model gains nothing from a second thread of its own
# (two workers of two threads each spent ~10 % of the CPU switching between them; measured in the house issue's note)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
echo "== nbdev_test (default tier; NBDEV_TEST_FLAGS=slow adds the notebooks' SmolLM2 cells) =="
$V/nbdev_test --n_workers 2 --timing ${NBDEV_TEST_FLAGS:+--flags "$NBDEV_TEST_FLAGS"}
# Two workers: while one test waits on a subprocess, a server or a tokenizer load, the other computes (measured in
# the closing note of the house issue); the workers share one tiny main job (`tiny_main_job` in tests/conftest.py). The slow tier (`make test-slow`) and the real-vLLM tier run after, in CI.
echo "== pytest tests/ (two workers; the ten slowest printed at the end) =="
$V/python -m pytest tests/ -q -rs -n 2 --durations=10 -m "not vllm and not speculators and not slow"
