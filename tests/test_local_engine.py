("The continuously batched local engine against independent references: transformers' `generate`, a no-cache "
 "greedy loop, rows alone.")
import asyncio
import httpx, pytest, torch
from eagle3nb.serve import start_server_process
from eagle3nb.local import LocalEngine, default_threads
from eagle3nb.protocol import Sampling
from eagle3nb.prompts import render_prompt

QUESTIONS = ["Hi", "What is the capital of France?", "Count to five, please.",
             "Name three colors.", "Why is the sky blue?"]

@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen3"])
def eng(request):
    e = LocalEngine(request.param)
    e.prompts = [render_prompt(e.target.tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS]
    return e

def reference_greedy(model, prompt_ids, n, rep=1.0, freq=0.0, pres=0.0, stops=()):
    ("Greedy decoding by recomputing the whole sequence each step (no KV cache), with vLLM's penalties "
     "written out plainly.")
    ids, out = list(prompt_ids), []
    with torch.inference_mode():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1].clone()
            for t in set(ids): logits[t] = logits[t] / rep if logits[t] > 0 else logits[t] * rep
            for t in set(out): logits[t] -= freq * out.count(t) + pres
            t = int(logits.argmax())
            out.append(t)
            ids.append(t)
            if t in stops: break
    return out

def test_greedy_equals_transformers_generate(eng):
    ("Alone and batched, greedy ids equal `model.generate`'s, also with a repetition penalty (transformers "
     "applies it the same way).")
    for rep in (1.0, 1.3):
        s = Sampling(max_new_tokens=16, repetition_penalty=rep)
        got = [g.output_ids for g in eng.generate_batch(eng.prompts, s)]
        for p, o in zip(eng.prompts, got):
            ref = eng.model.generate(torch.tensor([p]), max_new_tokens=16, do_sample=False, repetition_penalty=rep,
                                     eos_token_id=eng.eos_ids, pad_token_id=eng.eos_ids[0])[0, len(p):].tolist()
            assert o == ref, (rep, p[-5:])

def test_penalties_equal_a_plain_reference(eng):
    ("Frequency and presence penalties (and all three together) against a no-cache loop; rows with and without "
     "penalties side by side.")
    settings = [dict(frequency_penalty=1.5), dict(presence_penalty=2.0),
                dict(repetition_penalty=1.5, frequency_penalty=0.5, presence_penalty=-0.5), {}]
    samplings = [Sampling(max_new_tokens=12, **kw) for kw in settings]
    got = eng.generate_batch(eng.prompts[:4], samplings)
    for p, kw, g in zip(eng.prompts, settings, got):
        ref = reference_greedy(eng.model, p, 12, kw.get("repetition_penalty", 1.0), kw.get("frequency_penalty", 0.0),
                               kw.get("presence_penalty", 0.0), set(eng.eos_ids))
        assert g.output_ids == ref, kw
    plain = [g.output_ids for g in eng.generate_batch(eng.prompts[:4], Sampling(max_new_tokens=12))]
    # the penalty did something, the neighbour nothing
    assert got[3].output_ids == plain[3] and got[1].output_ids != plain[1]

def test_staggered_arrivals_from_threads(eng):
    ("Requests that join a running batch at different steps, from an event loop, get their ids alone; the "
     "long one saw them join.")
    s_long, s = Sampling(max_new_tokens=160), Sampling(max_new_tokens=24)
    hot = Sampling(max_new_tokens=24, temperature=0.8, top_k=40, seed=3)
    alone = [eng.generate_batch([eng.prompts[0]], s_long)[0].output_ids] + \
            [eng.generate_batch([p], x)[0].output_ids for p, x in zip(eng.prompts[1:], [s, hot, s, hot])]
    async def run():
        steps0 = eng.stats["steps"]
        first = asyncio.ensure_future(eng.generate(eng.prompts[0], s_long))
        later = []
        for k, (p, x) in enumerate(zip(eng.prompts[1:], [s, hot, s, hot])):
            while eng.stats["steps"] < steps0 + 4 * (k + 1): await asyncio.sleep(0.0005)   # join at steps ~4, 8, 12, 16
            later.append(asyncio.ensure_future(eng.generate(p, x)))
        return [await first] + [await f for f in later]
    res = asyncio.run(run())
    assert [g.output_ids for g in res] == alone
    assert res[0].finish_reason["type"] == "length" and res[0].meta["batch_size"] > 1

def test_server_threads_every_core_or_omp_num_threads(monkeypatch):
    ("`eagle3nb serve` runs the forward pass on every core, or on `OMP_NUM_THREADS` where set, shown "
     "in /get_server_info.")
    import os
    for env, want in ((None, len(os.sched_getaffinity(0))), ("1", 1)):
        if env is None: monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        else: monkeypatch.setenv("OMP_NUM_THREADS", env)
        proc, url = start_server_process("tiny-qwen3", max_batch=4)
        try:
            assert httpx.get(url + "/health_generate", timeout=60).status_code == 200
            stats = httpx.get(url + "/get_server_info").json()["stats"]
        finally:
            proc.terminate()
            proc.wait(30)
        assert stats["threads"] == want == default_threads()   # the worker thread's count

def test_transformers_forward_gives_the_same_ids(eng):
    ("The lean forward (default) and transformers' own forward (`lean=False`) give the same greedy ids, batched, "
     "on the same weights.")
    assert eng.forward is not None and eng.stats["forward"] == "lean"
    stock = LocalEngine(eng.target, lean=False)
    stock._model = eng.model                                    # the same weights, not a second load
    assert stock.forward is None and stock.stats["forward"] == "transformers (lean=False)"
    s = Sampling(max_new_tokens=20)
    assert ([g.output_ids for g in stock.generate_batch(eng.prompts, s)]
            == [g.output_ids for g in eng.generate_batch(eng.prompts, s)])

def test_bad_row_in_a_joining_step_fails_alone(eng):
    ("A prompt that breaks the forward (an id the embedding lacks, sent past `check_prompt`) joins a step with good "
     "rows: it fails, they get their ids alone.")
    from concurrent.futures import Future
    from eagle3nb.local import _Row
    s = Sampling(max_new_tokens=10)
    alone = [eng.generate_batch([p], s)[0].output_ids for p in eng.prompts[:3]]
    prompts = [eng.prompts[0], [eng.vocab_size + 7], eng.prompts[1], eng.prompts[2]]
    futs = [Future() for _ in prompts]
    eng._submit([_Row(list(p), s, lambda g, exc, f=f: f.set_exception(exc) if exc is not None else f.set_result(g), 0.0)
                 for p, f in zip(prompts, futs)])              # taken in together: one step would hold all four
    with pytest.raises(Exception, match="IndexError"): futs[1].result()
    assert [futs[i].result().output_ids for i in (0, 2, 3)] == alone

@pytest.fixture(scope="module")
def smollm2():
    return LocalEngine("smollm2")

def test_lean_forward_on_smollm2_equals_transformers(smollm2):
    ("Real weights (SmolLM2-135M, float32): greedy ids of the lean forward, batched, equal transformers' `generate` "
     "one prompt at a time.")
    e = smollm2
    prompts = [render_prompt(e.target.tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS]
    got = [g.output_ids for g in e.generate_batch(prompts, Sampling(max_new_tokens=40))]
    for p, o in zip(prompts, got):
        ref = e.model.generate(torch.tensor([p]), max_new_tokens=40, do_sample=False, eos_token_id=e.eos_ids,
                               pad_token_id=e.eos_ids[0])[0, len(p):].tolist()
        assert o == ref, p[-5:]

def test_a_rows_logits_do_not_depend_on_its_neighbours(smollm2):
    ("SmolLM2: a prompt's logits are bit for bit the same prefilled alone or beside others, and so are its "
     "decode-step logits beside rows of other lengths.")
    from eagle3nb.lean import SlotCache
    e, fwd = smollm2, smollm2.forward
    cfg = e.model.config
    prompts = [render_prompt(e.target.tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS]
    def run(ps):
        c = SlotCache(cfg.num_hidden_layers, len(ps), cfg.num_key_value_heads, fwd.D, torch.float32,
                      max_len=e.context_length)
        segs, st = [], 0
        for j, p in enumerate(ps):
            c.claim(j, len(p))
            segs.append((j, st, len(p)))
            st += len(p)
        c.begin_step(0)
        with torch.inference_mode():
            first = fwd.forward(torch.tensor(sum(ps, [])), c, 0, segs)
            c.end_step()
            c.begin_step(len(ps))
            step = fwd.forward(first.argmax(-1), c, len(ps), [])
            c.end_step()
        return first, step
    a1, a2 = run(prompts[1:2])
    b1, b2 = run(prompts)
    assert torch.equal(a1[0], b1[1]) and torch.equal(a2[0], b2[1])
