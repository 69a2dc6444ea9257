"""Client overhead of `eagle3nb generate` vs a minimal asyncio+httpx loop, side by side in one run.

Both drive the same `eagle3nb serve` app (a separate process) whose engine answers instantly with a
fixed-length output, at the same concurrency, over the same prompts. Prints requests/s, tokens/s and
the ratio eagle3nb / minimal (target >= 0.9). Then the local engine's tokens/s on SmolLM2 at batch 1
and batch 16.

    .venv/bin/python bench/client_overhead.py [--requests 2000] [--concurrency 32] [--out-len 64] [--skip-local]
"""
import argparse, asyncio, multiprocessing as mp, os, tempfile, time
from pathlib import Path

def _serve_fixed(port_q, out_len):
    "Child process: eagle3nb serve's app over an engine that answers instantly with `out_len` ids."
    if (os.cpu_count() or 1) >= 2: os.sched_setaffinity(0, {0})   # server on core 0, clients on core 1
    from eagle3nb.local import LocalEngine
    from eagle3nb.protocol import Generation
    from eagle3nb.serve import ServerThread, create_app
    class FixedEngine(LocalEngine):
        async def generate(self, prompt_ids, sampling, rid=None):
            self.check_prompt(prompt_ids, sampling)
            ids = [(7 + i) % 1000 for i in range(out_len)]
            return Generation(ids, {"type": "length", "length": out_len},
                              {"prompt_tokens": len(prompt_ids), "completion_tokens": out_len, "cached_tokens": 0}, {})
    st = ServerThread(create_app(FixedEngine("tiny-qwen3"))).start()
    port_q.put(st.url)
    st.thread.join()

async def minimal_loop(url, prompts, concurrency, out_len):
    "The baseline: `concurrency` workers, httpx, SGLang's request body, and nothing else (no checks, no records)."
    import httpx
    todo, tokens = list(enumerate(prompts))[::-1], 0
    # the same connection pool settings as eagle3nb's client, so only the client logic differs
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=None,
                                                                               max_keepalive_connections=64)) as c:
        async def worker():
            nonlocal tokens
            while todo:
                i, p = todo.pop()
                r = await c.post("/generate", json={"rid": f"m{i}", "input_ids": p, "stream": False, "sampling_params":
                                 {"max_new_tokens": out_len, "temperature": 0}})
                tokens += len(r.json()["output_ids"])
        t0 = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        return time.perf_counter() - t0, tokens

async def eagle3nb_run(url, prompts, concurrency, out_len):
    "eagle3nb generate: guards, retries policy, JSONL records, manifest — the real thing."
    from eagle3nb.core import JsonlWriter
    from eagle3nb.engines import SGLangEngine
    from eagle3nb.generate import generate_async
    run = Path(tempfile.mkdtemp())
    with JsonlWriter(run/"prompts/prompts.jsonl") as w:
        for i, p in enumerate(prompts): w.write({"id": f"p{i}", "prompt_ids": p})
    t0 = time.perf_counter()
    m = await generate_async(run, engines=[SGLangEngine(url)], max_new_tokens=out_len,
                             concurrency=concurrency, progress=False)
    dt = time.perf_counter() - t0
    assert m["counts"]["success"] == len(prompts), m["counts"]
    return dt, m["summary"]["output_tokens"]

def local_engine_bench():
    from eagle3nb.local import LocalEngine
    from eagle3nb.protocol import Sampling
    from eagle3nb.prompts import RowReader, resolve_input, render_prompt
    eng = LocalEngine("smollm2", max_batch=16)
    tok, prompts = eng.target.tokenizer, []
    for _, row in RowReader(resolve_input("sharegpt")):
        c = row.get("conversations") or []
        if c and c[0].get("from") == "human" and 10 < len(c[0]["value"]) < 400:
            prompts.append(render_prompt(tok, [{"role": "user", "content": c[0]["value"]}]))
        if len(prompts) == 16: break
    s = Sampling(max_new_tokens=64)
    eng.generate_batch(prompts[:1], Sampling(max_new_tokens=4))   # warm-up
    t0 = time.perf_counter()
    n1 = sum(len(eng.generate_batch([p], s)[0].output_ids) for p in prompts[:4])
    d1 = time.perf_counter() - t0
    t0 = time.perf_counter()
    n16 = sum(len(g.output_ids) for g in eng.generate_batch(prompts, s))
    d16 = time.perf_counter() - t0
    print(f"local engine, SmolLM2-135M float32, {os.cpu_count()} CPU cores, ShareGPT prompts, 64 new tokens:")
    print(f"  batch 1 : {n1 / d1:8.1f} tokens/s  ({n1} tokens, 4 prompts one by one, {d1:.1f} s)")
    print(f"  batch 16: {n16 / d16:8.1f} tokens/s  ({n16} tokens, {d16:.1f} s)   ratio batch16/batch1 = "
          f"{(n16 / d16) / (n1 / d1):.2f}")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--out-len", type=int, default=64)
    ap.add_argument("--skip-local", action="store_true")
    a = ap.parse_args()
    q = mp.get_context("spawn").Queue()
    srv = mp.get_context("spawn").Process(target=_serve_fixed, args=(q, a.out_len), daemon=True)
    srv.start()
    url = q.get(timeout=120)
    if (os.cpu_count() or 1) >= 2: os.sched_setaffinity(0, {1})
    prompts = [[151644, 872, 198] + [1000 + (i * 7 + j) % 5000 for j in range(40)] + [151645, 198, 151644, 77091, 198]
               for i in range(a.requests)]
    asyncio.run(minimal_loop(url, prompts[:200], a.concurrency, a.out_len))   # warm both paths
    res = {"minimal": [], "eagle3nb": []}
    for _ in range(2):   # interleaved, best of two each
        res["minimal"].append(asyncio.run(minimal_loop(url, prompts, a.concurrency, a.out_len)))
        res["eagle3nb"].append(asyncio.run(eagle3nb_run(url, prompts, a.concurrency, a.out_len)))
    srv.terminate()
    best = {k: min(v) for k, v in res.items()}
    print(f"client overhead: {a.requests} requests, concurrency {a.concurrency}, {a.out_len}-token answers from "
          "eagle3nb serve (instant engine)")
    for k, (dt, tok) in best.items(): print(f"  {k:9s}: {a.requests / dt:8.1f} req/s  {tok / dt:10.1f} tokens/s")
    ratio = best["minimal"][0] / best["eagle3nb"][0]
    print(f"  ratio eagle3nb / minimal (throughput): {ratio:.3f}   (target >= 0.9)")
    if not a.skip_local:
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
        local_engine_bench()

if __name__ == "__main__": main()
