# Two commands for a newcomer: `make run` (the main job on the embedded default) and `make test`.
.PHONY: setup run test test-slow lab clean-run

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/eagle3nb run --run runs/default

test:
	bash scripts/test.sh

test-slow:
	NBDEV_TEST_FLAGS=slow bash scripts/test.sh

lab: setup
	.venv/bin/jupyter lab nbs/
