"Every K at T=0 by exact replay (n-gram and the drafter), and training's τ_walk against the real loop's τ."
import pytest
import torch
from quick_drafter import fit_drafter
from eagle3nb.models import eos_ids
from eagle3nb.decode import SpecStats, run_prompts, spec_decode
from eagle3nb.replay import chain_drafts, greedy_tail, replay_eagle3, replay_ngram

NEW = ["Another new prompt here", "Why is the sky blue", "Count: 1 1 2 3 5 8", "a b a b a b"]
COUNTERS = ("drafts", "draft_tokens", "accepted", "accepted_per_pos", "target_forwards", "output_tokens")

@pytest.fixture(scope="module")
def fitted():
    "A drafter that accepts (3 TTT steps, fitted on tiny-llama's greedy outputs), the engine, and 8 prompts."
    d, eng, prompts, _ = fit_drafter("tiny-llama", steps=50)
    return d, eng, prompts[:4] + [eng.target.tokenizer.encode(s) for s in NEW]

def counters(st:SpecStats) -> tuple: return tuple(getattr(st, n) for n in COUNTERS)

def test_replay_equals_the_loop(fitted):
    ("Replayed counters = the real loop's, at several K, with EOS and max-token truncation (drafts "
     "verified past the end).")
    d, eng, prompts = fitted
    model, eos = eng.model, eos_ids(eng.target.path, eng.target.tokenizer)
    base = [spec_decode(model, p, 40, eos, method=None)[0] for p in prompts]
    fake_eos = [base[0][17]]        # a token the first output emits mid-way: truncation at "EOS" inside accepted drafts
    # (tiny-llama never emits its EOS in 40 tokens: a pass with it would only repeat the max-token rows of this one)
    stop = fake_eos
    outs = [spec_decode(model, p, 40, stop, method=None)[0] for p in prompts]
    assert min(map(len, outs)) < 40 and max(map(len, outs)) == 40   # both truncations: at "EOS" and max tokens
    seqs = [p + o + greedy_tail(model, p + o, 7) for p, o in zip(prompts, outs)]
    drafts = [chain_drafts(model, d, s, 5) for s in seqs]
    for k in (2, 5):
        loop, rep = SpecStats(k=k), SpecStats(k=k)
        for p, o, s in zip(prompts, outs, seqs):
            got, st = spec_decode(model, p, 40, stop, k=k, method="ngram")
            assert got == o
            loop.add(st)
            rep.add(replay_ngram(s, len(p), len(o), k))
        assert counters(rep) == counters(loop), (k, counters(rep), counters(loop))
        assert 0 < loop.accepted < loop.draft_tokens
    for k in (1, 3, 5):           # K=5 runs past the 3 fitted steps
        loop, rep = SpecStats(k=k), SpecStats(k=k)
        for p, o, s, dr in zip(prompts, outs, seqs, drafts):
            got, st = spec_decode(model, p, 40, stop, d, k=k, method="eagle3")
            assert got == o
            loop.add(st)
            rep.add(replay_eagle3(dr, s, len(p), len(o), k))
        assert 0 < loop.accepted < loop.draft_tokens
        assert abs(rep.tau - loop.tau) < 1e-3 and abs(rep.tokens_per_forward - loop.tokens_per_forward) < 1e-3, k
        assert counters(rep) == counters(loop), (k, counters(rep), counters(loop))

def test_replay_needs_the_tail(fitted):
    ("Without the greedy tokens past the end, drafts verified past EOS / max tokens go uncounted: the tail is "
     "what makes it exact.")
    d, eng, prompts = fitted
    model = eng.model
    short = 0
    for p in prompts:
        o = spec_decode(model, p, 40, [], method=None)[0]
        seq = p + o + greedy_tail(model, p + o, 7)
        real = spec_decode(model, p, 40, [], d, k=5, method="eagle3")[1]
        cut = replay_eagle3(chain_drafts(model, d, p + o, 5), p + o, len(p), len(o), 5)
        full = replay_eagle3(chain_drafts(model, d, seq, 5), seq, len(p), len(o), 5)
        assert counters(full) == counters(real)
        short += cut.accepted < real.accepted
    assert short > 0, "no prompt had drafts accepted past its end: the tail was not exercised"

def test_walk_predicts_the_loops_tau(fitted, tmp_path):
    "Training's held-out τ_walk on greedy records = the real loop's τ on the same outputs (T=0, float32), at each K."
    from eagle3nb.capture import capture
    from eagle3nb.core import JsonlWriter
    from eagle3nb.drafter import target_lm_head
    from eagle3nb.sources import OfflineSource
    from eagle3nb.train import Teacher, TrainConfig, evaluate_batches
    d, eng, prompts = fitted
    model, M = eng.model, 40
    outs = [spec_decode(model, p, M, [], method=None)[0] for p in prompts]    # greedy, EOS ignored
    (tmp_path/"validate").mkdir()
    with JsonlWriter(tmp_path/"validate/records.jsonl") as w:
        for i, (p, o) in enumerate(zip(prompts, outs)):
            w.write({"id": f"r{i}", "input_ids": p + o, "loss_mask": [0] * len(p) + [1] * len(o)})
    capture(tmp_path, target="tiny-llama", dtype="float32", progress=False)
    src = OfflineSource(tmp_path/"capture")
    ids = [f"r{i}" for i in range(len(prompts))]
    vocab = (d.d2t + torch.arange(len(d.d2t))).tolist()
    m = evaluate_batches(d, src, [ids], Teacher(target_lm_head(src.target), vocab), TrainConfig(ttt_steps=3),
                         walk_ids=set(ids))
    assert m["walk_records"] == len(ids)
    for K in (1, 2, 3):
        # the walk stops at the last cycle whose K drafts lie inside the record: the loop with M-K+1 new tokens
        _, st = run_prompts(model, [(str(i), p) for i, p in enumerate(prompts)], M - K + 1, [], drafter=d, k=K)
        assert 0 < st.accepted < st.draft_tokens
        print(f"K={K}: loop τ {st.tau:.4f}, τ_walk {m['tau_walk_k'][K - 1]:.4f}")
        assert abs(m["tau_walk_k"][K - 1] - st.tau) <= 0.01, (K, m["tau_walk_k"], st.tau)
    print(f"every-start τ_sim at K=3: {m['tau_sim']:.4f}")
