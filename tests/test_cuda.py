"""The cuda tier (`pytest -m cuda`): the tiny main job on a GPU, bf16 training, torchrun DDP over NCCL with every
visible GPU. Skipped, with the reason, where torch sees no CUDA GPU; every path it covers also runs on CPU in the
default tier (test_pipeline.py, test_train.py, test_eval_device.py)."""
import json, sys
import pytest
from conftest import BIN, run
from test_train import ARGS, _copy, _train_rows, captured   # noqa: F401  (the fixture, shared)

pytestmark = pytest.mark.cuda

def test_tiny_main_job_on_the_gpu(tmp_path):
    "Every stage of the tiny main job where a GPU exists: capture, training and evaluation take it by default."
    from eagle3nb.pipeline import run_default
    led = run_default("tiny", run=str(tmp_path/"run"))
    assert list(led)[-1] == "export" and (tmp_path/"run/report.html").exists()
    rep = json.loads((tmp_path/"run/evaluate/report.json").read_text())
    assert rep["config"]["device"].startswith("cuda"), rep["config"]

def test_bf16_training_on_the_gpu_is_finite_and_learns(captured, tmp_path):
    d = _copy(captured, tmp_path/"run")
    r = run([str(BIN/"eagle3nb"), "train", "--run", str(d), *ARGS, "--bf16", "gpu"])
    assert r.returncode == 0, r.stderr[-3000:]
    rows = _train_rows(d)
    assert all(all(v == v for v in x["loss_k"]) for x in rows)          # finite (NaN != NaN)
    assert rows[-1]["loss_k"][0] < rows[0]["loss_k"][0]

def test_torchrun_nccl_over_every_gpu_follows_one_process(captured, tmp_path):
    import torch
    n = torch.cuda.device_count()
    one, many = _copy(captured, tmp_path/"one"), _copy(captured, tmp_path/"many")
    args = [*ARGS, "--bf16", "never"]                                    # float32: comparable across world sizes
    r = run([str(BIN/"eagle3nb"), "train", "--run", str(one), *args])
    assert r.returncode == 0, r.stderr[-3000:]
    r = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n),
             str(BIN/"eagle3nb"), "--", "train", "--run", str(many), *args])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    a, b = _train_rows(one), _train_rows(many)
    assert len(a) == len(b) == 16
    for x, y in zip(a, b):
        assert x["supervised"] == y["supervised"]
        for u, v in zip(x["loss_k"], y["loss_k"]): assert abs(u - v) <= 1e-3 * max(1, abs(u)), (x["step"], u, v)
