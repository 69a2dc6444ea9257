("At T > 0 with argmax drafts (vLLM's proposers), the real draft-and-verify loop and the replay of the drafts over "
 "plain samples are one process: the same output tokens in distribution, the same tokens per target forward in mean.")
import random
from collections import Counter
import pytest
from quick_drafter import fit_drafter
from eagle3nb.decode import spec_decode_batch
from eagle3nb.protocol import Sampling
from eagle3nb.replay import greedy_runs, replay_prompts

T, TOP_K, TOP_P = 0.8, 20, 0.95     # a served sampling: temperature, then top-k, then top-p (vLLM's order)
N, K, SEEDS = 24, 3, 64             # tokens an answer, drafts a cycle, answers a prompt and method

@pytest.fixture(scope="module")
def fitted():
    "A drafter that accepts (fitted on tiny-llama's greedy outputs), the engine, and 2 prompts."
    d, eng, prompts, _ = fit_drafter("tiny-llama", steps=50)
    return d, eng, prompts[:2]

def loop(model, d, prompt, method, seeds):
    "The real loop at the served sampling, one answer a seed (rows batched): `(outputs, tokens per target forward)`."
    got = spec_decode_batch(model, [prompt] * len(seeds), N, [], d, k=K, method=method, temperature=T, seeds=seeds,
                            greedy_draft=True, top_k=TOP_K, top_p=TOP_P)
    return [o for o, _ in got], [st.tokens_per_forward for _, st in got]

def replayed(eng, d, prompt, method, seeds, sampling):
    "Plain sampling (the engine's sampler, one seed an answer), then the drafts replayed over each answer."
    model = eng.model
    runs = greedy_runs(model, [prompt] * len(seeds), N, [], tail=K, aux_layers=d.config.aux_layers_hf,
                       batch_size=16, engine=eng, sampling=sampling, seeds=seeds)
    per = replay_prompts(model, d, [(str(s), prompt) for s in seeds], runs, [K] if method == "eagle3" else [],
                         [K] if method == "ngram" else [])
    name = "eagle3" if method == "eagle3" else "ngram2-4"
    return [r["output"] for r in runs], [q["by_k"][name][K].tokens_per_forward for q in per]

def tv_permutation_p(a:list, b:list, perms:int=400, seed:int=0) -> float:
    "Two-sample test of equal distributions: total-variation distance, p-value by permutation."
    def tv(x, y):
        cx, cy = Counter(x), Counter(y)
        return sum(abs(cx[t] / len(x) - cy[t] / len(y)) for t in cx.keys() | cy.keys()) / 2
    obs, pool, rng, hits = tv(a, b), a + b, random.Random(seed), 0
    for _ in range(perms):
        rng.shuffle(pool)
        hits += tv(pool[:len(a)], pool[len(a):]) >= obs
    return (hits + 1) / (perms + 1)

def agree(loop_runs, rep_runs) -> list:
    "What differs between two sets of `(outputs, tokens per forward)`: empty when they agree (the rule in the file)."
    (lo, lt), (ro, rt) = loop_runs, rep_runs
    bad = []
    for j in (0, 1, 4, 12):                   # the token at a few positions, and the first three as one event
        if (p := tv_permutation_p([o[j] for o in lo], [o[j] for o in ro])) < 1e-3: bad.append(f"token {j}: p={p}")
    if (p := tv_permutation_p([tuple(o[:3]) for o in lo], [tuple(o[:3]) for o in ro])) < 1e-3:
        bad.append(f"first three tokens: p={p}")
    mean = lambda x: sum(x) / len(x)
    se = lambda x: (sum((v - mean(x)) ** 2 for v in x) / (len(x) - 1) / len(x)) ** 0.5
    if abs(mean(lt) - mean(rt)) > 4 * (se(lt) ** 2 + se(rt) ** 2) ** 0.5:   # 4 standard errors of the difference
        bad.append(f"tokens per forward {mean(lt):.3f} (loop) vs {mean(rt):.3f} (replay)")
    return bad

@pytest.mark.parametrize("method", ["eagle3", "ngram"])
def test_sampled_loop_equals_replay_over_plain_samples(fitted, method):
    d, eng, prompts = fitted
    sp = Sampling(max_new_tokens=N, temperature=T, top_p=TOP_P, top_k=TOP_K)
    accepted = 0
    for i, p in enumerate(prompts):
        lruns = loop(eng.model, d, p, method, [10_000 * i + s for s in range(SEEDS)])
        ro = replayed(eng, d, p, method, [20_000 + 10_000 * i + s for s in range(SEEDS)], sp)
        assert not (bad := agree(lruns, ro)), (method, i, bad)
        assert len({tuple(o) for o in lruns[0]}) > SEEDS // 4       # sampled: the answers vary
        accepted += sum(t > 1 + 1e-9 for t in lruns[1])
    assert accepted > 0                                               # drafts were accepted: the check has teeth

def test_the_check_sees_a_different_process(fitted):
    "The same check flags replay over answers sampled colder (T=0.3, top-k 3) against the loop: it can fail."
    d, eng, prompts = fitted
    p = prompts[0]
    other = replayed(eng, d, p, "ngram", list(range(SEEDS)), Sampling(max_new_tokens=N, temperature=0.3, top_k=3))
    assert agree(loop(eng.model, d, p, "ngram", list(range(SEEDS))), other)
