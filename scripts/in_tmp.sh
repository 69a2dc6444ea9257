#!/usr/bin/env bash
# Run a command with a TMPDIR of its own, removed when it ends: the notebooks' temporary runs (mkdtemp), pytest's
# tmp_path (gigabytes in the real-shape tier), vLLM's logs and the quick drafters all go there, so a test run leaves
# nothing in /tmp. Without it every `make test` left about 1.7 GB behind, and 28 GB of leftovers once filled the disk
# under the Kimi-K2.5-shaped resume test.
#   bash scripts/in_tmp.sh CMD ARGS...
set -uo pipefail
TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/eagle3nb-test.XXXXXX") || exit 1
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
"$@"
