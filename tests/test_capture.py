"Hidden-state capture: NaN quarantine, kill -9 and resume, budget skips, and torchrun with 2 gloo processes."
import shutil, signal, subprocess, sys, time
from pathlib import Path
import torch
from conftest import BIN, run
from eagle3nb.core import JsonlWriter, read_jsonl, read_manifest
from eagle3nb.capture import CaptureReader, capture, forward_states
from eagle3nb.models import target_dir, load_target

def _records(run_dir, n=40, seed=0):
    recs = [{"id": f"s{i}", "input_ids": [1] + [(13 * i + 7 * j + seed) % 900 + 3 for j in range(6 + (i * 5) % 37)],
             "loss_mask": None} for i in range(n)]
    for r in recs: r["loss_mask"] = [0] * 3 + [1] * (len(r["input_ids"]) - 3)
    with JsonlWriter(Path(run_dir)/"validate/records.jsonl") as w:
        for r in recs: w.write(r)
    return recs

def _all(cap_dir):
    rd = CaptureReader(cap_dir)
    return {k: {n: t.clone() for n, t in rd[k].items()} for k in rd.index}

def test_nonfinite_sample_is_quarantined_and_capture_goes_on(tmp_path):
    # a real model directory whose embedding row for one token id is NaN: every sample containing it goes non-finite
    poisoned = tmp_path/"poisoned"
    shutil.copytree(target_dir("tiny-llama"), poisoned)
    from safetensors.torch import load_file, save_file
    w = load_file(str(poisoned/"model.safetensors"))
    key = next(k for k in w if k.endswith("embed_tokens.weight"))
    w[key][777] = float("nan")
    save_file(w, str(poisoned/"model.safetensors"), metadata={"format": "pt"})
    _records(tmp_path/"run", 10)
    recs_bad = {"id": "bad", "input_ids": [1, 5, 777, 9], "loss_mask": [0, 1, 1, 1]}
    with JsonlWriter(tmp_path/"run/validate/records.jsonl") as w_: w_.write(recs_bad)
    m = capture(tmp_path/"run", poisoned, progress=False)
    assert (m["counts"]["captured"], m["counts"]["quarantined"], m["counts"]["records"]) == (10, 1, 11)
    q = read_jsonl(tmp_path/"run/capture/quarantine-r0.jsonl")
    assert q[0]["id"] == "bad" and "non-finite values in aux layer 2 (HF index) at token" in q[0]["reason"]
    assert "bad" not in CaptureReader(tmp_path/"run/capture").index

def test_budget_skip_and_batched_equals_one_by_one(tmp_path):
    recs = _records(tmp_path/"run", 12)
    m = capture(tmp_path/"run", "tiny-llama", max_tokens=30, dtype="float32", batch_tokens=256, progress=False)
    long_ids = {r["id"] for r in recs if len(r["input_ids"]) > 30}
    assert m["counts"]["skipped"] == len(long_ids) > 0
    assert {o["id"] for o in read_jsonl(tmp_path/"run/capture/skipped-r0.jsonl")} == long_ids
    model = load_target("tiny-llama").load_model()
    got = _all(tmp_path/"run/capture")
    for r in recs:
        if r["id"] in long_ids: continue
        aux, final, _ = forward_states(model, [r["input_ids"]], [2, 4, 5])
        assert torch.allclose(got[r["id"]]["aux"], aux[0], atol=1e-5) and torch.allclose(got[r["id"]]["final"], final[0], atol=1e-5)
        assert got[r["id"]]["input_ids"].tolist() == r["input_ids"]

def test_kill_9_mid_capture_then_resume(tmp_path):
    _records(tmp_path/"ref", 60); _records(tmp_path/"run", 60)
    ref = capture(tmp_path/"ref", "tiny-llama", shard_tokens=64, batch_tokens=64, progress=False)
    args = [str(BIN/"eagle3nb"), "capture", "--run", str(tmp_path/"run"), "--target", "tiny-llama",
            "--shard_tokens", "64", "--batch_tokens", "64"]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shards = tmp_path/"run/capture/shards"
    t0 = time.time()
    while len(list(shards.glob("*.safetensors"))) < 3 and time.time() - t0 < 120: time.sleep(0.01)
    p.send_signal(signal.SIGKILL); p.wait()
    n_before = len(list(shards.glob("*.safetensors")))
    assert 3 <= n_before < ref["counts"]["shards"], "killed too late to test resume"
    assert not (tmp_path/"run/capture/index.jsonl").exists()
    r = run(args)
    assert r.returncode == 0, r.stderr
    m = read_manifest(tmp_path/"run/capture")
    assert (m["counts"]["captured"], m["counts"]["records"]) == (60, 60)
    ids = [o["id"] for o in read_jsonl(tmp_path/"run/capture/index.jsonl")]
    assert sorted(ids) == sorted(f"s{i}" for i in range(60)) and len(ids) == len(set(ids))   # complete, no sample twice
    got, want = _all(tmp_path/"run/capture"), _all(tmp_path/"ref/capture")
    assert all(torch.equal(got[k][n], want[k][n]) for k in want for n in want[k])

def test_torchrun_two_gloo_processes_equal_one(tmp_path):
    _records(tmp_path/"one", 30); _records(tmp_path/"two", 30)
    capture(tmp_path/"one", "tiny-llama", shard_tokens=128, progress=False)
    r = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
             str(BIN/"eagle3nb"), "--", "capture", "--run", str(tmp_path/"two"), "--target", "tiny-llama", "--shard_tokens", "128"],
            env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    m = read_manifest(tmp_path/"two/capture")
    assert m["config"]["world_size"] == 2 and m["counts"]["captured"] == 30
    shards = {p.name.split("-")[0] for p in (tmp_path/"two/capture/shards").glob("*.safetensors")}
    assert shards == {"r0", "r1"}                                   # each rank wrote its own shards
    one, two = _all(tmp_path/"one/capture"), _all(tmp_path/"two/capture")
    assert one.keys() == two.keys()
    for k in one:
        for n in one[k]: assert torch.allclose(one[k][n].float(), two[k][n].float(), atol=2e-2), (k, n)
