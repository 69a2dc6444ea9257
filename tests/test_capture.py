"Hidden-state capture: NaN quarantine, kill -9 and resume, budget skips, and torchrun with 2 gloo processes."
import json, shutil, signal, subprocess, sys, time
from pathlib import Path
import pytest, torch
from conftest import BIN, pause_env, run, wait_paused
from eagle3nb.core import InputError, JsonlWriter, read_jsonl, read_manifest
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
    m = capture(tmp_path/"run", target=poisoned, progress=False)
    assert (m["counts"]["captured"], m["counts"]["quarantined"], m["counts"]["records"]) == (10, 1, 11)
    q = read_jsonl(tmp_path/"run/capture/quarantine-r0.jsonl")
    assert q[0]["id"] == "bad" and "non-finite values in aux layer 2 (HF index) at token" in q[0]["reason"]
    assert "bad" not in CaptureReader(tmp_path/"run/capture").index

def test_budget_skip_and_batched_equals_one_by_one(tmp_path):
    recs = _records(tmp_path/"run", 12)
    m = capture(tmp_path/"run", target="tiny-llama", max_tokens=30, dtype="float32", batch_tokens=256, progress=False)
    long_ids = {r["id"] for r in recs if len(r["input_ids"]) > 30}
    assert m["counts"]["skipped"] == len(long_ids) > 0
    assert {o["id"] for o in read_jsonl(tmp_path/"run/capture/skipped-r0.jsonl")} == long_ids
    model = load_target("tiny-llama").load_model()
    got = _all(tmp_path/"run/capture")
    for r in recs:
        if r["id"] in long_ids: continue
        aux, final, _ = forward_states(model, [r["input_ids"]], [2, 4, 5])
        assert (torch.allclose(got[r["id"]]["aux"], aux[0], atol=1e-5)
                and torch.allclose(got[r["id"]]["final"], final[0], atol=1e-5))
        assert got[r["id"]]["input_ids"].tolist() == r["input_ids"]

def test_kill_9_mid_capture_then_resume(tmp_path):
    _records(tmp_path/"ref", 60)
    _records(tmp_path/"run", 60)
    ref = capture(tmp_path/"ref", target="tiny-llama", shard_tokens=64, batch_tokens=64, progress=False)
    args = [str(BIN/"eagle3nb"), "capture", "--run", str(tmp_path/"run"), "--target", "tiny-llama",
            "--shard_tokens", "64", "--batch_tokens", "64"]
    env, marker = pause_env(tmp_path, "shard", 3)               # it waits after its third shard: killed there
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait_paused(p, marker)
    p.send_signal(signal.SIGKILL)
    p.wait()
    shards = tmp_path/"run/capture/shards"
    assert len(list(shards.glob("*.safetensors"))) == 3 < ref["counts"]["shards"]
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
    _records(tmp_path/"one", 30)
    _records(tmp_path/"two", 30)
    capture(tmp_path/"one", target="tiny-llama", shard_tokens=128, progress=False)
    r = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
             str(BIN/"eagle3nb"), "--", "capture", "--run", str(tmp_path/"two"), "--target", "tiny-llama",
             "--shard_tokens", "128"],
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

def test_rerun_after_kill_with_other_layers_is_refused(tmp_path):
    ("A kill -9 leaves shards and no manifest; a rerun asking for other layers (or dtypes) must not add shards of "
     "another configuration.")
    _records(tmp_path/"run", 12)
    capture(tmp_path/"run", target="tiny-llama", shard_tokens=64, progress=False)
    cap = tmp_path/"run/capture"
    (cap/"manifest.json").unlink()
    (cap/"index.jsonl").unlink()                                            # what a kill before the end leaves
    shards = sorted(p.name for p in (cap/"shards").iterdir())
    cfg = json.loads((cap/"config.json").read_text())
    assert cfg["aux_layers_hf"] == [2, 4, 5] and cfg["dtype"] == "bfloat16" and cfg["model_dtype"] == "float32"
    assert cfg["target"] == str(target_dir("tiny-llama")) and len(cfg["target_config_sha256"]) == 16
    with pytest.raises(InputError) as e:
        capture(tmp_path/"run", target="tiny-llama", aux_layers=[1, 3, 5], shard_tokens=64, progress=False)
    assert ("aux_layers_hf=[2, 4, 5]" in str(e.value) and "aux_layers_hf=[1, 3, 5]" in str(e.value)
            and "--fresh" in str(e.value))
    with pytest.raises(InputError, match="dtype='bfloat16'.*dtype='float16'"):
        capture(tmp_path/"run", target="tiny-llama", dtype="float16", progress=False)
    r = run([str(BIN/"eagle3nb"), "capture", "--run", str(tmp_path/"run"), "--target", "tiny-llama",
             "--aux_layers", "1,3,5"])
    assert r.returncode == 2 and "--fresh" in r.stderr, r.stderr
    assert sorted(p.name for p in (cap/"shards").iterdir()) == shards                 # nothing added
    m = capture(tmp_path/"run", target="tiny-llama", aux_layers=[1, 3, 5], shard_tokens=64, fresh=True, progress=False)
    assert m["counts"]["captured"] == 12 and m["config"]["aux_layers_hf"] == [1, 3, 5]
    assert json.loads((cap/"config.json").read_text())["aux_layers_hf"] == [1, 3, 5]

def test_shards_without_config_are_refused(tmp_path):
    _records(tmp_path/"run", 4)
    capture(tmp_path/"run", target="tiny-llama", progress=False)
    (tmp_path/"run/capture/config.json").unlink()
    with pytest.raises(InputError, match="no config.json"): capture(tmp_path/"run", target="tiny-llama", progress=False)

def _poisoned(tmp_path, value):
    "tiny-llama with the embedding row of token 777 set to `value`."
    d = tmp_path/f"poisoned-{value}"
    shutil.copytree(target_dir("tiny-llama"), d)
    from safetensors.torch import load_file, save_file
    w = load_file(str(d/"model.safetensors"))
    w[next(k for k in w if k.endswith("embed_tokens.weight"))][777] = value
    save_file(w, str(d/"model.safetensors"), metadata={"format": "pt"})
    return d

def test_float16_overflow_is_checked_after_the_cast(tmp_path):
    "States finite in float32 but beyond float16's 65504 become inf when stored as float16: quarantined, not stored."
    big = _poisoned(tmp_path, 1e6)
    for run_dir, dtype in (("f32", "float32"), ("f16", "float16")):
        _records(tmp_path/run_dir, 4)
        with JsonlWriter(tmp_path/run_dir/"validate/records.jsonl") as w:
            w.write({"id": "big", "input_ids": [1, 5, 777, 9], "loss_mask": [0, 1, 1, 1]})
    m32 = capture(tmp_path/"f32", target=big, dtype="float32", progress=False)
    assert (m32["counts"]["captured"], m32["counts"]["quarantined"]) == (5, 0)          # finite in float32
    assert CaptureReader(tmp_path/"f32/capture")["big"]["aux"].abs().max() > 65504
    m16 = capture(tmp_path/"f16", target=big, dtype="float16", progress=False)
    assert (m16["counts"]["captured"], m16["counts"]["quarantined"]) == (4, 1)
    q = read_jsonl(tmp_path/"f16/capture/quarantine-r0.jsonl")
    assert q[0]["id"] == "big" and "after the cast to float16" in q[0]["reason"] and "at token 2" in q[0]["reason"]
    rd = CaptureReader(tmp_path/"f16/capture")
    assert "big" not in rd.index and all(torch.isfinite(rd[k]["aux"]).all() for k in rd.index)

def test_resume_under_another_world_size_reads_every_ranks_files(tmp_path):
    "Records settled by rank 1 of a 2-process run (here: a quarantined one) are not redone by a 1-process resume."
    poisoned = _poisoned(tmp_path, float("nan"))
    _records(tmp_path/"run", 6)
    with JsonlWriter(tmp_path/"run/validate/records.jsonl") as w: w.write({"id": "bad", "input_ids": [1, 5, 777, 9],
                                                                           "loss_mask": [0, 1, 1, 1]})
    capture(tmp_path/"run", target=poisoned, progress=False)
    cap = tmp_path/"run/capture"
    (cap/"quarantine-r0.jsonl").rename(cap/"quarantine-r1.jsonl")   # as rank 1 of a 2-process run would have left it
    m = capture(tmp_path/"run", target=poisoned, progress=False)
    assert (m["counts"]["captured"], m["counts"]["quarantined"], m["counts"]["records"]) == (6, 1, 7)
    assert m["counts"]["this_run_tokens_rank0"] == 0 and read_jsonl(cap/"quarantine-r0.jsonl") == []

def _specforge_data_module():
    ("SpecForge's `algorithms/eagle3/data.py`, loaded from the installed package without importing its "
     "top level (GPU stacks).")
    import importlib.util
    spec = importlib.util.find_spec("specforge")
    assert spec is not None, "specforge==0.2.0 is not installed: run `bash scripts/setup.sh` (it installs it --no-deps)"
    path = Path(spec.submodule_search_locations[0])/"algorithms"/"eagle3"/"data.py"
    mod_spec = importlib.util.spec_from_file_location("specforge_eagle3_data", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return mod

def test_specforge_offline_files_load_in_specforge(tmp_path):
    ("SpecForge's own normalize_offline_sample on our files: shapes as it expects, and the loss mask survives (only "
     "its last slot zeroed).")
    from eagle3nb.capture import export_specforge
    data = _specforge_data_module()
    recs = _records(tmp_path/"run", 5)
    capture(tmp_path/"run", target="tiny-llama", progress=False)
    n = export_specforge(tmp_path/"run/capture", tmp_path/"sf")
    assert n == 5
    by_id = {r["id"]: r for r in recs}
    for i in range(n):
        raw = torch.load(tmp_path/f"sf/data_{i}.ckpt")
        rec, L = by_id[raw["id"]], len(by_id[raw["id"]]["input_ids"])
        out = data.normalize_offline_sample(raw, max_len=4096)
        assert tuple(out["input_ids"].shape) == (1, L) and tuple(out["loss_mask"].shape) == (1, L)
        assert tuple(out["hidden_state"].shape) == (1, L, 3 * 64) and tuple(out["target"].shape) == (1, L, 64)
        assert out["input_ids"][0].tolist() == rec["input_ids"]
        assert out["loss_mask"][0].tolist() == rec["loss_mask"][:-1] + [0]         # SpecForge zeroes the last slot only
        assert int(out["loss_mask"].sum()) == sum(rec["loss_mask"]) - 1 > 0
