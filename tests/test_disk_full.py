"""A full disk said plainly (#46): each stage that writes fails with an error naming the file, the bytes it needed and
the bytes free, and what to do; no half-written file is left under a final name; freed, a rerun resumes. On a real
small filesystem (a tmpfs, where this machine lets a test mount one: as root), and, everywhere, with the errors
torch.save, safetensors and the OS raise on a full disk fed to each writer."""
import errno, gc, json, shutil, subprocess
from pathlib import Path
import pytest, torch
from safetensors import SafetensorError
from eagle3nb.core import DiskFullError, JsonlWriter, atomic_write_text, read_jsonl, read_manifest, write_json

FULL = (r"no space left on its disk \((needed [\d,]+ bytes, )?[\d,]+ bytes free there\): free space on that disk or "
        r"pass --run a directory on another one, then rerun: it resumes where it stopped")
TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 4053376 vs 4053264"
ST_FULL = 'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'


def _records(run, n=24, prompt_len=8, new=32):
    "Validated records: tiny-llama's own greedy continuations of random prompts (what capture reads)."
    from eagle3nb.models import load_target
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, 5000, (n, prompt_len), generator=g)
    with torch.no_grad():
        out = load_target("tiny-llama").load_model().generate(prompts, max_new_tokens=new, do_sample=False,
                                                              pad_token_id=0).tolist()
    with JsonlWriter(Path(run)/"validate/records.jsonl") as w:
        for i, ids in enumerate(out):
            w.write({"id": f"r{i}", "input_ids": ids, "loss_mask": [0] * prompt_len + [1] * new})


@pytest.fixture
def small_disk(tmp_path):
    "A tmpfs of 64 MiB, resized by `resize(bytes)`; skipped where mounting is not allowed (the stub tests still run)."
    d = tmp_path/"disk"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode: pytest.skip(f"no tmpfs mount here ({r.stderr.strip()[:80]}); test_each_writer_* covers it")
    try: yield d
    finally: subprocess.run(["umount", "-l", str(d)], capture_output=True)


def _leave(d, spare:int):
    "Resize tmpfs `d` to what it holds now plus `spare` bytes (page-rounded)."
    used = shutil.disk_usage(d).used
    subprocess.run(["mount", "-o", f"remount,size={used + spare}", str(d)], check=True)


def _no_temporaries(d):
    left = [p for p in Path(d).rglob("*") if ".tmp" in p.name]
    assert not left, left


def test_each_stage_on_a_full_tmpfs_says_so_and_resumes(small_disk):
    from eagle3nb.capture import capture
    from eagle3nb.export import export_format
    from eagle3nb.train import train
    run = small_disk/"run"
    _records(run)
    # capture: shards of 64 tokens (41,360 bytes each), room for two
    _leave(small_disk, 100 << 10)
    with pytest.raises(DiskFullError, match=FULL) as e:
        capture(run, target="tiny-llama", shard_tokens=64, batch_tokens=64, progress=False)
    assert str(run/"capture") in str(e.value)
    print(f"\ncapture: {e.value}")
    _no_temporaries(run)
    kept = sorted((run/"capture/shards").glob("*.safetensors"))
    assert len(kept) == 2
    _leave(small_disk, 32 << 20)                                 # space freed: the rerun keeps what was written
    m = capture(run, target="tiny-llama", shard_tokens=64, batch_tokens=64, progress=False)
    assert all(p.exists() for p in kept) and m["counts"]["this_run_tokens_rank0"] < sum(
        len(r["input_ids"]) for r in read_jsonl(run/"validate/records.jsonl"))
    assert (m["counts"]["captured"], m["counts"]["records"]) == (24, 24)
    # train: a checkpoint (weights and AdamW's moments) does not fit
    kw = dict(ttt_steps=2, draft_vocab_size=256, max_steps=4, batch_tokens=160, ckpt_every=2, heldout=0.1,
              progress=False)
    _leave(small_disk, 1536 << 10)                               # one checkpoint (939,060 bytes) fits, not two
    with pytest.raises(DiskFullError, match=FULL) as e: train(run, **kw)
    first = run/"train/checkpoints/step-000002.pt"
    assert first.exists() and "step-000004.pt" in str(e.value)
    t_first = first.stat().st_mtime_ns
    assert str(run/"train") in str(e.value) and "needed" in str(e.value)
    print(f"train: {e.value}")
    _no_temporaries(run)
    del e
    gc.collect()                # the failed torch.save's file, deleted, is let go (as at the end of a process)
    _leave(small_disk, 32 << 20)
    assert train(run, **kw)["counts"]["steps"] == 4
    assert first.stat().st_mtime_ns == t_first                   # resumed from it, not trained again
    # export: the drafter's tensors do not fit
    _leave(small_disk, 16 << 10)
    with pytest.raises(DiskFullError, match=FULL) as e: export_format(run, "sglang")
    assert "export/sglang/model.safetensors: no space left" in str(e.value)
    print(f"export: {e.value}")
    _no_temporaries(run)
    _leave(small_disk, 32 << 20)
    assert (export_format(run, "sglang")/"model.safetensors").exists()
    # reports and manifests (written whole, by a rename): nothing under the final name
    _leave(small_disk, 8 << 10)
    with pytest.raises(DiskFullError, match=FULL): write_json(run/"report.json", {"x": "y" * (64 << 10)})
    assert not (run/"report.json").exists()
    _no_temporaries(run)
    assert read_manifest(run/"train")["counts"]["steps"] == 4


def _drafter():
    from eagle3nb.drafter import new_drafter
    from eagle3nb.models import load_target
    d = new_drafter(load_target("tiny-llama"), [0, 5, 7, 200], [2, 4, 5])
    return d, torch.optim.AdamW([p for p in d.parameters() if p.requires_grad])


def _half_then(err):
    "A writer that leaves half a file at its path argument, then raises `err` (as the library does on a full disk)."
    def write(obj, path, *a, **k):
        Path(path).write_bytes(b"half")
        raise err
    return write


def test_each_writer_turns_the_librarys_full_disk_error_into_a_plain_one(tmp_path, monkeypatch):
    import safetensors.torch
    from eagle3nb.capture import ShardWriter
    from eagle3nb.drafter import save_drafter
    from eagle3nb.export import export_sglang
    from eagle3nb.resume import save_checkpoint
    from eagle3nb.sources import DraftVocab
    from eagle3nb.stream import Spool
    from eagle3nb.train import TrainConfig
    d, opt = _drafter()
    # checkpoints: torch.save's own words for a full disk
    monkeypatch.setattr(torch, "save", _half_then(RuntimeError(TORCH_FULL)))
    with pytest.raises(DiskFullError, match="step-000001.pt: " + FULL.replace(r"(needed [\d,]+ bytes, )?",
                                                                          r"needed [\d,]+ bytes, ")):
        save_checkpoint(tmp_path/"step-000001.pt", d, opt, 1, TrainConfig(), DraftVocab([0, 5], 1.0, 2, 2))
    assert list(tmp_path.iterdir()) == []                         # the half-written temporary file is gone
    monkeypatch.undo()
    # safetensors' words: capture shards, the drafter, exports, the stream's spool
    monkeypatch.setattr(safetensors.torch, "save_file", _half_then(SafetensorError(ST_FULL)))
    w = ShardWriter(tmp_path/"shards", "r0", "float32", shard_tokens=4)
    with pytest.raises(DiskFullError, match="r0-00000.safetensors: " + FULL):
        w.add("a", torch.zeros(4, 192), torch.zeros(4, 64), [1, 2, 3, 4], [0, 1, 1, 1])
    with pytest.raises(DiskFullError, match=r"drafter/model.safetensors: " + FULL): save_drafter(d, tmp_path/"drafter")
    with pytest.raises(DiskFullError, match=r"sglang/model.safetensors: " + FULL): export_sglang(d, tmp_path/"sglang")
    with pytest.raises(DiskFullError, match=r"spool/shards/s1.safetensors: " + FULL):
        Spool(tmp_path/"spool", 1 << 20).write("s1", {"aux": torch.zeros(2, 3)}, {})
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []   # nothing half-written left
    monkeypatch.undo()
    # the OS's words (ENOSPC), for the JSON and JSONL every stage writes
    def enospc(*a): raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr("os.fsync", enospc)
    with pytest.raises(DiskFullError, match="report.json: " + FULL): write_json(tmp_path/"report.json", {"a": 1})
    with pytest.raises(DiskFullError, match="notes.txt: " + FULL): atomic_write_text(tmp_path/"notes.txt", "x")
    monkeypatch.undo()
    with JsonlWriter(tmp_path/"g.jsonl") as jw:
        jw.write({"id": "q0"})
        class _Full:
            def write(self, b): raise OSError(errno.ENOSPC, "No space left on device")
        jw._f, real = _Full(), jw._f
        with pytest.raises(DiskFullError, match=r"g.jsonl: no space left on its disk \(needed 12 bytes"):
            jw.write({"id": "q1"})
        jw._f = real
    assert [json.loads(x)["id"] for x in (tmp_path/"g.jsonl").read_text().splitlines()] == ["q0"]
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["g.jsonl"]


def test_the_plan_reads_the_disk_the_run_will_live_on_and_refuses_up_front(small_disk):
    "A run directory not made yet: the plan reads its nearest existing parent's filesystem, not the working one's."
    from eagle3nb.core import InputError
    from eagle3nb.pipeline import _gib, plan, run_pipeline
    from eagle3nb.settings import pipeline_config
    _leave(small_disk, 12 << 20)                                 # a 12 MiB disk
    run = small_disk/"not/made/yet"
    c = pipeline_config(target="tiny-llama", run=str(run), generate={"n_prompts": 10**5, "max_new_tokens": 2048})
    line = next(ln for ln in plan(c) if ln.startswith("  capture"))
    assert f"; {_gib(shutil.disk_usage(small_disk).free)} free" in line and "DOES NOT FIT" in line, line
    with pytest.raises(InputError, match=r"capture needs .* more disk .* but .* has 1\d\.\d MiB free"): run_pipeline(c)
    assert not (run/"prompts").exists()                          # refused before its first stage
