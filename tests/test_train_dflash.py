"""DFlash training and replay on tiny-bigram (the next token a fixed function of this one, so a drafter learns it in
seconds): kill -9 then resume gives the uninterrupted run's metrics step for step, a resumed run with other settings
is refused, and the replay of a trained drafter's block drafting equals the real draft-and-verify loop at several K,
with answers cut by EOS and by max tokens."""
import signal, subprocess, sys
from pathlib import Path
import pytest
from conftest import pause_env, run, wait_paused
from planted import without_moments, without_tensor
from eagle3nb.core import InputError, JsonlWriter, Run, read_jsonl, read_manifest
from eagle3nb.capture import capture
from eagle3nb.decode import SpecStats
from eagle3nb.dflash import load_dflash
from eagle3nb.models import load_target
from eagle3nb.replay import greedy_runs
from eagle3nb.replay_dflash import dflash_drafts, replay_dflash, replay_prompts_dflash, spec_decode_dflash
from eagle3nb.train_dflash import train_dflash

KW = dict(block_size=4, anchors=16, max_steps=16, lr=1e-2, warmup_steps=2, batch_tokens=128, heldout=0.2,
          log_every=1, ckpt_every=4, eval_every=8)

@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    "A float32 capture of tiny-bigram's greedy answers to 16 random prompts (copied per test)."
    import torch
    d = tmp_path_factory.mktemp("cap")/"run"
    tgt = load_target("tiny-bigram")
    model = tgt.load_model()
    prompts = torch.randint(3, 500, (16, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(): out = model.generate(prompts, max_new_tokens=24, do_sample=False, pad_token_id=0).tolist()
    (d/"validate").mkdir(parents=True)
    with JsonlWriter(d/"validate/records.jsonl") as w:
        for i, s in enumerate(out): w.write({"id": f"g{i}", "input_ids": s, "loss_mask": [0] * 8 + [1] * 24})
    capture(d, target="tiny-bigram", dtype="float32", progress=False)
    return d

def _copy(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return dst

SCRIPT = "import sys; from eagle3nb.train_dflash import train_dflash; train_dflash(sys.argv[1], progress=False, **{kw})"

def _rows(run_dir, split="train"):
    return [r for r in read_jsonl(Run(run_dir).dflash_metrics) if r["split"] == split]

def test_kill_9_then_resume_gives_the_uninterrupted_metrics(captured, tmp_path):
    ref, cut = _copy(captured, tmp_path/"ref"), _copy(captured, tmp_path/"cut")
    train_dflash(ref, progress=False, **KW)
    args = [sys.executable, "-c", SCRIPT.format(kw=repr(KW)), str(cut)]
    env, marker = pause_env(tmp_path, "checkpoint", 8)          # it waits after checkpoint 8: killed there
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait_paused(p, marker)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not (Run(cut).dflash_dir/"manifest.json").exists()
    assert max(r["step"] for r in _rows(cut)) == 8
    r = run(args)
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = _rows(ref), _rows(cut)
    assert [x["step"] for x in b] == list(range(1, 17))          # every step once, none twice
    for x, y in zip(a, b):
        assert {k: v for k, v in x.items() if k != "seconds"} == {k: v for k, v in y.items() if k != "seconds"}, x
    assert _rows(ref, "heldout") == _rows(cut, "heldout")
    m = read_manifest(Run(cut).dflash_dir)
    assert m["counts"]["steps"] == 16 and m["final"]["heldout"]["accept_pos"][0] > 0.1
    assert (Run(cut).dflash_dir/"plots/dflash_acceptance_by_position.png").exists()
    x, y = load_dflash(Run(ref).dflash_drafter), load_dflash(Run(cut).dflash_drafter)
    assert all((x.state_dict()[k] == v).all() for k, v in y.state_dict().items())

def test_resume_with_other_settings_is_refused(captured, tmp_path):
    cut = _copy(captured, tmp_path/"cut")
    train_dflash(cut, progress=False, **{**KW, "max_steps": 4})
    with pytest.raises(InputError, match="block_size"): train_dflash(cut, progress=False, **{**KW, "block_size": 5})
    with pytest.raises(InputError, match="drafter='dflash'"):
        from eagle3nb.train import train
        train(cut, drafter="dflash", progress=False)

def test_replay_of_a_trained_drafter_equals_the_loop(captured, tmp_path):
    cut = _copy(captured, tmp_path/"cut")
    train_dflash(cut, progress=False, **{**KW, "max_steps": 30})
    d = load_dflash(Run(cut).dflash_drafter)
    tgt = load_target("tiny-bigram")
    model = tgt.load_model()
    import torch
    prompts = torch.randint(3, 500, (6, 8), generator=torch.Generator().manual_seed(1)).tolist()
    base = [spec_decode_dflash(model, d, p, 30, [], k=2)[0] for p in prompts]
    for stop in ([], [base[0][9]]):       # no EOS, then a token the first answer emits mid-way as a fake EOS
        runs = greedy_runs(model, prompts, 30, stop, tail=5, aux_layers=d.config.aux_layers_hf)
        per = replay_prompts_dflash(model, d, list(enumerate(prompts)), runs, [1, 2, 5])
        for k in (1, 2, 5):
            loop, rep = SpecStats(k=k), SpecStats(k=k)
            for p, r, q in zip(prompts, runs, per):
                out, st = spec_decode_dflash(model, d, p, 30, stop, k=k)
                assert out == r["output"]
                loop.add(st)
                rep.add(q["by_k"]["dflash"][k])
                seq = p + r["output"] + r["tail"]
                one = replay_dflash(dflash_drafts(d, seq, r["aux"], len(p), len(out), k), seq, len(p), len(out), k)
                assert one.accepted_per_pos == q["by_k"]["dflash"][k].accepted_per_pos
            assert 0 < loop.accepted < loop.draft_tokens, (k, loop)
            keys = ("drafts", "draft_tokens", "accepted", "accepted_per_pos", "target_forwards", "output_tokens")
            assert [getattr(rep, n) for n in keys] == [getattr(loop, n) for n in keys], (k, rep, loop)
        if stop: assert min(len(r["output"]) for r in runs) < 30       # the fake EOS did cut an answer

# the resume check on a 2-layer drafter, AdamW's moments in bf16 (the real-shape test's optimizer): ref trains 2 steps
# keeping both checkpoints; each resume starts from ref's step-1 checkpoint, a defect planted in it or not, and its
# step 2 is compared with ref's by `compare_resumed` (what test_real_shapes_dflash compares with)
RESUME = dict(block_size=4, anchors=16, max_steps=2, lr=1e-2, warmup_steps=1, batch_tokens=128, heldout=0.2,
              log_every=1, ckpt_every=1, keep_checkpoints=0, dflash_layers=2, optim_state="bfloat16")

def _resume_from(captured, ref, where, plant=None):
    "Step 2's sample of a run resumed from `ref`'s step-1 checkpoint, `plant(state)` done to it first."
    import torch
    from eagle3nb.resume import load_checkpoint, sample_checkpoint
    cut = _copy(captured, where)
    ck = Run(cut).dflash_checkpoints
    ck.mkdir(parents=True)
    state = load_checkpoint(Run(ref).dflash_checkpoints/"step-000001.pt")
    torch.save(plant(state) if plant else state, ck/"step-000001.pt")
    train_dflash(cut, progress=False, **RESUME)
    return sample_checkpoint(ck/"step-000002.pt")

def test_the_resume_check_sees_lost_moments_and_a_missing_tensor(captured, tmp_path):
    import torch
    from eagle3nb.resume import compare_resumed, sample_checkpoint
    ref = _copy(captured, tmp_path/"ref")
    train_dflash(ref, progress=False, **RESUME)
    want, lr = sample_checkpoint(Run(ref).dflash_checkpoints/"step-000002.pt"), _rows(ref)[1]["lr"]
    figs = compare_resumed(want, _resume_from(captured, ref, tmp_path/"clean"), lr)   # a clean resume passes
    assert "layers.1.mlp.down_proj.weight" in figs and figs["fc.weight"]["max_diff"] == 0
    q = "layers.1.self_attn.q_proj.weight"
    def zeroed(state):                   # one tensor's moments lost, its step count kept: a strict loader cannot tell
        st = state["optimizer"]["state"][state["param_names"].index(q)]
        for m in ("exp_avg", "exp_avg_sq"): st[m] = torch.zeros_like(st[m])
        return state
    with pytest.raises(AssertionError, match=rf"{q}: .*exp_avg off by") as e:
        compare_resumed(want, _resume_from(captured, ref, tmp_path/"zeroed", zeroed), lr)
    assert "layers.0" not in str(e.value)                                      # only that tensor is named
    with pytest.raises(InputError, match=r"its tensors are not this drafter's \(missing \['layers.1.mlp.up_proj"):
        _resume_from(captured, ref, tmp_path/"dropped", without_tensor("layers.1.mlp.up_proj.weight"))
    with pytest.raises(InputError, match=r"AdamW's state is incomplete \(no step and moments .* for fc.weight\)"):
        _resume_from(captured, ref, tmp_path/"no_moments", without_moments("fc.weight"))
