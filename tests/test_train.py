"""Drafter training: exact resume after kill -9, 2 torchrun processes = 1, online = offline, bad settings refused,
learnability."""
import json, os, signal, subprocess, sys
from pathlib import Path
import pytest, torch
from conftest import BIN, pause_env, run, wait_paused
from planted import without_moments, without_tensor
from eagle3nb.core import InputError, JsonlWriter, read_jsonl, read_manifest
from eagle3nb.capture import capture
from eagle3nb.models import load_target

def _greedy_records(run_dir, target="tiny-llama", n=24, prompt_len=10, new=30, seed=0, vocab=5000):
    "The target's own greedy continuations of random prompts, as validated records."
    tgt = load_target(target)
    model = tgt.load_model()
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, vocab, (n, prompt_len), generator=g)
    with torch.no_grad(): out = model.generate(prompts, max_new_tokens=new, do_sample=False, pad_token_id=0).tolist()
    Path(run_dir, "validate").mkdir(parents=True, exist_ok=True)
    with JsonlWriter(Path(run_dir)/"validate/records.jsonl") as w:
        for i, s in enumerate(out): w.write({"id": f"g{i}", "input_ids": s, "loss_mask": [0] * prompt_len + [1] * new})

@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    "A float32 capture of tiny-llama's greedy outputs (copied per test)."
    d = tmp_path_factory.mktemp("cap")/"run"
    _greedy_records(d)
    capture(d, target="tiny-llama", dtype="float32", progress=False)
    return d

def _copy(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return dst

ARGS = ["--ttt_steps", "3", "--draft_vocab_size", "512", "--max_steps", "16", "--batch_tokens", "160", "--lr", "3e-3",
        "--warmup_steps", "4", "--log_every", "1", "--ckpt_every", "4", "--eval_every", "8", "--heldout", "0.15"]

def _train_rows(run_dir):
    return [r for r in read_jsonl(Path(run_dir)/"train/metrics.jsonl") if r["split"] == "train"]

def test_kill_9_then_resume_gives_the_uninterrupted_losses(captured, tmp_path):
    ref, cut = _copy(captured, tmp_path/"ref"), _copy(captured, tmp_path/"cut")
    r = run([str(BIN/"eagle3nb"), "train", "--run", str(ref), *ARGS])
    assert r.returncode == 0, r.stderr[-3000:]
    args = [str(BIN/"eagle3nb"), "train", "--run", str(cut), *ARGS]
    env, marker = pause_env(tmp_path, "checkpoint", 8)          # it waits after checkpoint 8: killed there
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait_paused(p, marker)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not (cut/"train/manifest.json").exists()
    assert max(r["step"] for r in _train_rows(cut)) == 8
    r = run(args)
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = _train_rows(ref), _train_rows(cut)
    assert [x["step"] for x in b] == list(range(1, 17))            # every step once, none twice
    for x, y in zip(a, b):
        assert (x["loss_k"], x["acc_k"], x["tau_sim"]) == (y["loss_k"], y["acc_k"], y["tau_sim"]), x["step"]
    m = read_manifest(cut/"train")
    assert m["counts"]["steps"] == 16 and (cut/"train/drafter/model.safetensors").exists()
    assert {p.name for p in (cut/"train/plots").glob("*.png")} == {"acceptance_by_position.png", "tau_sim.png",
                                                                "cond_acc_final.png"}

def test_torchrun_two_gloo_processes_follow_one(captured, tmp_path):
    one, two = _copy(captured, tmp_path/"one"), _copy(captured, tmp_path/"two")
    r = run([str(BIN/"eagle3nb"), "train", "--run", str(one), *ARGS], env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    r = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
             str(BIN/"eagle3nb"), "--", "train", "--run", str(two), *ARGS], env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert read_manifest(two/"train")["config"]["world_size"] == 2
    a, b = _train_rows(one), _train_rows(two)
    assert len(a) == len(b) == 16
    for x, y in zip(a, b):
        assert x["supervised"] == y["supervised"]
        for u, v in zip(x["loss_k"], y["loss_k"]): assert abs(u - v) <= 1e-4 * max(1, abs(u)), (x["step"], u, v)

def test_online_equals_offline_on_the_same_batch(captured):
    from eagle3nb.sources import OfflineSource, OnlineSource, draft_vocab
    from eagle3nb.train import Teacher, plan_steps, ttt_loss
    from eagle3nb.drafter import new_drafter, target_lm_head
    off = OfflineSource(captured/"capture")
    on = OnlineSource(captured/"validate/records.jsonl", "tiny-llama", off.aux_layers)
    ids = ["g3", "g7", "g11"]
    a, b = off.batch(ids), on.batch(ids)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask)
    vocab = draft_vocab(off.counts(), 512, 49152)
    assert off.counts() == on.counts()
    d = new_drafter(off.target, vocab.ids, off.aux_layers)
    ta, tb = (Teacher(target_lm_head(off.target), vocab.ids) for _ in "ab")   # each its own argmax memo
    la, sa = ttt_loss(d, a, plan_steps(a, ta, 3))
    lb, sb = ttt_loss(d, b, plan_steps(b, tb, 3))
    assert float(la) > 0 and abs(float(la) - float(lb)) < 1e-4 * float(la)
    assert [s["supervised"] for s in sa] == [s["supervised"] for s in sb]

def test_mismatched_layers_or_settings_are_refused(captured, tmp_path):
    d = _copy(captured, tmp_path/"run")
    r = run([str(BIN/"eagle3nb"), "train", "--run", str(d), "--aux_layers", "1,4,5", *ARGS])
    assert r.returncode == 2 and "the capture holds aux layers (HF) [2, 4, 5]" in r.stderr
    r = run([str(BIN/"eagle3nb"), "train", "--run", str(d), *ARGS[:-8], "--ckpt_every", "4", "--max_steps", "4"])
    assert r.returncode == 0, r.stderr[-2000:]
    r = run([str(BIN/"eagle3nb"), "train", "--run", str(d), *ARGS[:-8], "--ckpt_every", "4", "--max_steps", "8",
             "--lr", "1e-2"])
    assert r.returncode == 2 and "was trained with lr=0.003" in r.stderr and "--fresh" in r.stderr

def test_drafter_learns_a_tiny_target_and_generalises_to_held_out_records(tmp_path):
    ("Budget: 600 steps of 2k tokens, K=1 — about 30 s on 2 idle CPU cores. A random lm_head start reaches 0.04 by "
     "step 200.")
    from eagle3nb.train import train
    _greedy_records(tmp_path, "tiny-bigram", n=1024, prompt_len=12, new=16, vocab=512)
    capture(tmp_path, target="tiny-bigram", dtype="float32", progress=False)
    m = train(tmp_path, ttt_steps=1, draft_vocab_size=512, max_steps=600, lr=2e-2, warmup_steps=10, batch_tokens=2048,
              heldout=0.15, eval_every=50, log_every=50, progress=False)
    rows = [r for r in read_jsonl(tmp_path/"train/metrics.jsonl") if r["split"] == "heldout"]
    assert rows[0]["acc_k"][0] < 0.7 and rows[-1]["acc_k"][0] > 0.9, [r["acc_k"] for r in rows]
    assert m["counts"]["heldout_records"] > 100 and m["final"]["heldout"]["tau_sim"] > 1.9

def test_heldout_records_without_labels_are_trained_on(tmp_path):
    "A prompt alone (a context record) has nothing to measure on: it is never held out, offline or online."
    from eagle3nb.sources import heldout_split
    from eagle3nb.train import train
    _greedy_records(tmp_path, n=24, new=8)
    recs = read_jsonl(tmp_path/"validate/records.jsonl")
    for r in recs[::2]: r["loss_mask"] = [0] * len(r["loss_mask"])      # every other record: the prompt only
    with JsonlWriter(tmp_path/"validate/records.jsonl") as w:
        for r in recs: w.write(r)
    capture(tmp_path, target="tiny-llama", dtype="float32", progress=False)
    ids = sorted(r["id"] for r in recs)
    _, held = heldout_split(ids, 0.5, 0)
    bare = {r["id"] for r in recs[::2]}
    assert held and set(held) & bare and set(held) - bare          # the hash split draws both kinds
    kw = dict(ttt_steps=1, draft_vocab_size=256, max_steps=1, batch_tokens=256, heldout=0.5, loss_positions="all",
              progress=False)
    for source in ("offline", "online"):
        m = train(tmp_path, source=source, target="tiny-llama", fresh=True, **kw)
        assert m["counts"]["heldout_records"] == len(set(held) - bare), source
        assert m["counts"]["train_records"] == 24 - len(set(held) - bare), source

def test_resume_refuses_a_changed_capture(captured, tmp_path):
    ("The checkpoint names the capture it trained on (sha256 of its index); a changed capture is refused, --fresh "
     "starts over.")
    from eagle3nb.train import train
    d = _copy(captured, tmp_path/"run")
    kw = dict(ttt_steps=1, draft_vocab_size=256, batch_tokens=160, ckpt_every=2, heldout=0.15, progress=False)
    train(d, max_steps=2, **kw)
    train(d, max_steps=3, **kw)                                   # the same capture resumes
    idx = d/"capture/index.jsonl"
    idx.write_text("".join(idx.read_text().splitlines(keepends=True)[:-1]))   # a capture with one record fewer
    with pytest.raises(InputError) as e: train(d, max_steps=4, **kw)
    msg = str(e.value)
    assert "sha256" in msg and str(idx) in msg and "--fresh" in msg and "step-000003.pt" in msg, msg
    assert train(d, max_steps=2, fresh=True, **kw)["counts"]["records"] == 23

def test_train_and_heldout_metrics_count_the_answers(captured, tmp_path):
    "With the loss on every position, both the train and the held-out rows still measure the answers (the same slots)."
    from eagle3nb.train import train
    d = _copy(captured, tmp_path/"run")
    m = train(d, ttt_steps=2, draft_vocab_size=49152, max_steps=1, batch_tokens=1 << 16, heldout=0.2,
              loss_positions="all", log_every=1, eval_every=1, progress=False)
    rows = {r["split"]: r for r in read_jsonl(d/"train/metrics.jsonl")}
    n_tr, n_ho = m["counts"]["train_records"], m["counts"]["heldout_records"]
    assert n_tr and n_ho
    # each record: 10 prompt tokens, 30 answer tokens; step k drafts from slots 9 .. 37-k
    # (a full vocabulary: all supervised)
    assert rows["train"]["supervised"] == [n_tr * (29 - k) for k in range(2)], rows["train"]["supervised"]
    assert rows["heldout"]["supervised"] == [n_ho * (29 - k) for k in range(2)], rows["heldout"]["supervised"]

def test_acc_k_counts_out_of_vocabulary_targets_as_misses(captured):
    ("acc_k = draft argmax = target argmax over every answer slot of step k, a target token the drafter cannot "
     "propose a miss.")
    from eagle3nb.metrics import summarize_stats
    from eagle3nb.sources import OfflineSource
    from eagle3nb.train import Teacher, chain_slots, plan_steps, ttt_loss
    from eagle3nb.drafter import new_drafter, target_lm_head
    src = OfflineSource(captured/"capture")
    b = src.batch(["g1", "g2", "g5"])
    counts = src.counts()
    vocab = sorted(counts, key=lambda i: -counts[i])[:40]                # a small vocabulary: many targets out of it
    d = new_drafter(src.target, sorted(vocab), src.aux_layers, init_fc="high")
    teacher = Teacher(target_lm_head(src.target), sorted(vocab))
    with torch.no_grad():
        _, st = ttt_loss(d, b, plan_steps(b, teacher, 1))
        draft = d.to_target_ids(d.logits(d.ttt_forward(b.input_ids, b.aux, b.lengths, 1)[0]).argmax(-1))
    want = (b.final @ teacher.W.float().T).argmax(-1)                      # the target's next token at each position
    slots = chain_slots(b.loss_mask, 0)
    right = (draft[:, :-1] == want[:, 1:])[slots[:, :-1]]                  # slot p drafts x[p+2], the argmax at p+1
    in_vocab = teacher.t2d[want[:, 1:][slots[:, :-1]]]
    assert 0 < int(in_vocab.sum()) < len(in_vocab) and int(right.sum()) > 0
    assert summarize_stats(st)["acc_k"][0] == round(float(right.float().mean()), 5)

def test_tau_walk_walks_greedy_answers_only(tmp_path):
    "τ_walk walks the held-out records of T=0 data, never context records; at T > 0 none."
    from eagle3nb.core import write_jsonl_atomic, write_manifest
    from eagle3nb.sources import heldout_split
    from eagle3nb.train import train
    _greedy_records(tmp_path, n=16, new=8)
    recs = read_jsonl(tmp_path/"validate/records.jsonl")
    for r in recs[:6]: r["id"] = "context-" + r["id"]   # a dataset's reply: labels, but not the target's output
    write_jsonl_atomic(tmp_path/"validate/records.jsonl", recs)
    capture(tmp_path, target="tiny-llama", dtype="float32", progress=False)
    _, held = heldout_split(sorted(r["id"] for r in recs), 0.5, 0)
    assert any(i.startswith("context-") for i in held) and not all(i.startswith("context-") for i in held)
    kw = dict(ttt_steps=2, draft_vocab_size=256, max_steps=1, batch_tokens=256, heldout=0.5, progress=False, fresh=True)
    for temp, walked in ((0.0, len([i for i in held if not i.startswith("context-")])), (0.7, 0)):
        write_manifest(tmp_path/"generate", "generate", {"sampling": {"temperature": temp}}, {})
        m = train(tmp_path, **kw)
        row = [r for r in read_jsonl(tmp_path/"train/metrics.jsonl") if r["split"] == "heldout"][-1]
        assert m["counts"]["walked_records"] == row["walk_records"] == walked, (temp, row["walk_records"])
        assert (row["tau_walk"] is None) == (walked == 0) and m["counts"]["heldout_records"] == len(held)

def test_chunked_loss_gives_the_unchunked_loss_gradients_and_metrics(captured):
    ("float32: `ttt_loss` in chunks of 7 rows (recomputed in backward) = all rows at once, loss and gradients "
     "within 1e-5.")
    from eagle3nb.sources import OfflineSource, draft_vocab
    from eagle3nb.train import Teacher, plan_steps, ttt_loss
    from eagle3nb.drafter import new_drafter, target_lm_head
    src = OfflineSource(captured/"capture")
    b = src.batch(["g1", "g2", "g5", "g9"])
    vocab = draft_vocab(src.counts(), 512, 49152)
    d = new_drafter(src.target, vocab.ids, src.aux_layers, init_fc="high")
    teacher = Teacher(target_lm_head(src.target), vocab.ids)
    for which in ("labels", "all"):          # all: the metrics' own plans take the no-grad path
        plans, mplans = plan_steps(b, teacher, 3, which), plan_steps(b, teacher, 3)
        out = {}
        for chunk in (None, 7):
            d.zero_grad()
            loss, st = ttt_loss(d, b, plans, 0.8, None, mplans, chunk=chunk)
            loss.backward()
            out[chunk] = loss.detach(), st, {n: p.grad.clone() for n, p in d.named_parameters() if p.requires_grad}
        (l0, s0, g0), (l7, s7, g7) = out[None], out[7]
        assert float(l0) > 0 and abs(float(l7) - float(l0)) <= 1e-5 * float(l0), (which, float(l0), float(l7))
        for n in g0: torch.testing.assert_close(g7[n], g0[n], rtol=1e-5, atol=1e-7, msg=f"{which}: {n}")
        for x, y in zip(s0, s7):
            assert abs(x["loss_sum"] - y["loss_sum"]) <= 1e-5 * max(1.0, x["loss_sum"]), which
            assert {**x, "loss_sum": 0} == {**y, "loss_sum": 0}, which        # acc, full, slots: identical

def test_teacher_argmax_memo_is_cpu_int32_and_unchanged(captured):
    ("The argmax memo holds 4 bytes a token on the CPU; what `argmax` returns is the full-vocabulary argmax, as "
     "long ids.")
    from eagle3nb.sources import OfflineSource
    from eagle3nb.train import Teacher
    from eagle3nb.drafter import target_lm_head
    src = OfflineSource(captured/"capture")
    b = src.batch(["g1", "g2", "g5"])
    teacher = Teacher(target_lm_head(src.target), list(range(512)), chunk=16)
    first, again = teacher.argmax(b), teacher.argmax(b)
    want = (b.final @ teacher.W.float().T).argmax(-1)
    for i, n in enumerate(b.lengths): assert torch.equal(first[i, :n], want[i, :n]) and not first[i, n:].any()
    assert torch.equal(first, again) and first.dtype == torch.long
    assert {(m.dtype, m.device.type) for m in teacher.memo.values()} == {(torch.int32, "cpu")}

def test_loss_chunk_is_free_to_change_on_resume(captured, tmp_path):
    "Training with loss_chunk=0 (the old path) or in chunks logs the same metrics; a run resumes under another chunk."
    from eagle3nb.train import train
    kw = dict(ttt_steps=2, draft_vocab_size=256, batch_tokens=160, ckpt_every=2, heldout=0.15, log_every=1,
              progress=False)
    rows = {}
    for chunk in (0, 5):
        d = _copy(captured, tmp_path/f"c{chunk}")
        train(d, max_steps=2, loss_chunk=chunk, **kw)
        rows[chunk] = _train_rows(d)
    assert rows[0][0]["acc_k"] == rows[5][0]["acc_k"]                  # step 1: the same weights, the same drafts
    for x, y in zip(rows[0], rows[5]):
        assert x["supervised"] == y["supervised"] and all(abs(u - v) <= 0.02 for u, v in zip(x["acc_k"], y["acc_k"]))
        for u, v in zip(x["loss_k"], y["loss_k"]): assert abs(u - v) <= 1e-4 * max(1, abs(u)), (x["step"], u, v)
    assert train(tmp_path/"c0", max_steps=3, loss_chunk=5, **kw)["counts"]["steps"] == 3


# the resume check on a tiny drafter: ref trains 2 steps keeping both checkpoints; each resume starts from ref's
# step-1 checkpoint (a defect planted in it, or not), trains step 2 in another run directory, and is compared with
# ref's step 2 by `compare_resumed` (the function the real-shape test uses), tensor by tensor
RESUME = dict(ttt_steps=3, draft_vocab_size=512, max_steps=2, batch_tokens=160, lr=3e-3, warmup_steps=1, log_every=1,
              ckpt_every=1, keep_checkpoints=0, heldout=0.15, eval_every=8)

def _resume_from(captured, ref, where, plant=None):
    "Step 2 of a run resumed from `ref`'s step-1 checkpoint, `plant(state)` done to it first: `(sample, train rows)`."
    from eagle3nb.resume import load_checkpoint, sample_checkpoint
    from eagle3nb.train import train
    cut = _copy(captured, where)
    (cut/"train/checkpoints").mkdir(parents=True)
    state = load_checkpoint(ref/"train/checkpoints/step-000001.pt")
    torch.save(plant(state) if plant else state, cut/"train/checkpoints/step-000001.pt")
    train(cut, progress=False, **RESUME)
    return sample_checkpoint(cut/"train/checkpoints/step-000002.pt"), _train_rows(cut)

def _moments_zeroed(name):
    "Lose `name`'s AdamW moments (its step count kept, so that a strict loader cannot tell)."
    def plant(state):
        st = state["optimizer"]["state"][state["param_names"].index(name)]
        for m in ("exp_avg", "exp_avg_sq"): st[m] = torch.zeros_like(st[m])
        return state
    return plant

def test_the_resume_check_sees_each_tensor(captured, tmp_path):
    from eagle3nb.resume import compare_resumed, sample_checkpoint
    from eagle3nb.train import train
    ref = _copy(captured, tmp_path/"ref")
    train(ref, progress=False, **RESUME)
    want, rows = sample_checkpoint(ref/"train/checkpoints/step-000002.pt"), _train_rows(ref)
    lr = rows[1]["lr"]                                          # step 2's: the one step the two runs took apart
    got, rows_got = _resume_from(captured, ref, tmp_path/"clean")
    figs = compare_resumed(want, got, lr)                       # a clean resume passes, every tensor on its own
    assert set(figs) == set(want["tensors"]) and rows_got[-1]["lr"] == lr
    # planted: one tensor's moments lost, the rest intact
    bad, _ = _resume_from(captured, ref, tmp_path/"moments", _moments_zeroed("fc.weight"))
    with pytest.raises(AssertionError, match=r"fc\.weight: .*exp_avg off by") as e: compare_resumed(want, bad, lr)
    assert "midlayer" not in str(e.value)                      # only that tensor is named
    # planted: one tensor left at a fresh initialisation (what a lax loader left of a tensor missing from the file)
    def reinit(state):
        w = state["model"]["norm.weight"]
        state["model"]["norm.weight"] = torch.randn_like(w) * 0.02 + 1
        return state
    bad, _ = _resume_from(captured, ref, tmp_path/"reinit", reinit)
    with pytest.raises(AssertionError, match=r"norm\.weight: .*differ"): compare_resumed(want, bad, lr)
    # planted: one tensor missing from the resumed checkpoint
    gone = {**got, "tensors": {k: v for k, v in got["tensors"].items() if k != "lm_head.weight"}}
    with pytest.raises(AssertionError, match=r"lm_head\.weight: missing from the resumed run's checkpoint"):
        compare_resumed(want, gone, lr)
    # planted: a NaN in one tensor
    nan = sample_checkpoint(tmp_path/"clean/train/checkpoints/step-000002.pt")
    nan["tensors"]["fc.weight"]["weight"][3] = float("nan")
    with pytest.raises(AssertionError, match=r"fc\.weight: 1 non-finite"): compare_resumed(want, nan, lr)
    # the training code loads strictly: a tensor missing from the checkpoint, or one tensor's moments, is refused
    with pytest.raises(InputError, match=r"000001.pt: its tensors are not this drafter's \(missing \['fc.weight'\]"):
        _resume_from(captured, ref, tmp_path/"gone", without_tensor("fc.weight"))
    with pytest.raises(InputError, match=r"AdamW's state is incomplete \(no step and moments .* for fc.weight\)"):
        _resume_from(captured, ref, tmp_path/"nomoments", without_moments("fc.weight"))

class _Payload:
    "What a hostile checkpoint could hold: unpickling it runs `os.mkdir`."
    def __init__(self, where): self.where = str(where)
    def __reduce__(self): return (os.mkdir, (self.where,))

def test_a_checkpoint_that_would_run_code_is_refused(captured, tmp_path):
    from eagle3nb.resume import load_checkpoint
    from eagle3nb.train import train
    run_dir = _copy(captured, tmp_path/"run")
    train(run_dir, progress=False, **{**RESUME, "max_steps": 1})
    ck = run_dir/"train/checkpoints/step-000001.pt"
    state, ran = torch.load(ck, weights_only=True), tmp_path/"ran"     # not mapped: the file is written over below
    torch.save({**state, "config": _Payload(ran)}, ck)
    torch.load(ck, weights_only=False)                          # the payload is live: plain unpickling runs it
    assert ran.is_dir()
    ran.rmdir()
    with pytest.raises(InputError, match=r"step-000001.pt: refused: it holds more than tensors and plain values"):
        train(run_dir, progress=False, **{**RESUME, "max_steps": 2})
    assert not ran.exists()                                     # refused without running
    # torch's legacy (pre-zip) format: refused with the way to convert it; converted, it resumes
    torch.save(state, ck, _use_new_zipfile_serialization=False)
    with pytest.raises(InputError, match="scripts/convert_checkpoint.py FILE"): load_checkpoint(ck)
    r = run([sys.executable, str(Path(__file__).parents[1]/"scripts/convert_checkpoint.py"), str(ck)])
    assert r.returncode == 0, r.stderr
    assert load_checkpoint(ck)["step"] == 1
    m = train(run_dir, progress=False, **{**RESUME, "max_steps": 2})
    assert m["counts"]["steps"] == 2
