"""Capture throughput vs the bare forward pass that computes the same hidden states, side by side in one run.

Both run the same model over the same length-sorted batches: the bare pass stops at the tensors;
capture also slices per sample, checks finiteness, converts to bf16 and writes safetensors shards
and their index. The legs **alternate** (bare, capture, bare, capture, ... at least 3 each), each
pair gives one ratio, and the median ratio is printed with its spread (min-max over the pairs): one
pair of legs measured minutes apart on a shared machine says more about the machine than about
capture. A median above 1 means the machine was noisy between legs (capture does strictly more
work). Also bytes/token against the physical minimum, and peak RSS. On the tiny target and SmolLM2.

    .venv/bin/python bench/capture_throughput.py [--records 64] [--targets tiny-llama,smollm2] [--reps 3]
"""
import argparse, resource, statistics, tempfile, time
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

def main(argv=None):
    from eagle3nb.capture import _batches, capture, default_aux_layers, forward_states
    from eagle3nb.core import JsonlWriter
    from eagle3nb.models import load_target
    ap = argparse.ArgumentParser(); ap.add_argument("--records", type=int, default=64)
    ap.add_argument("--targets", default="tiny-llama,smollm2"); ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=3, help="pairs of legs, alternated (at least 3)")
    a = ap.parse_args(argv)
    if a.reps < 3: ap.error(f"--reps {a.reps}: at least 3 alternations are needed for a median and a spread")
    results = {}
    for name in a.targets.split(","):
        tgt = load_target(name); cfg = tgt.config()
        recs = records(a.records, int(cfg["vocab_size"]))
        ntok = sum(len(r["input_ids"]) for r in recs)
        model = tgt.load_model()
        layers = default_aux_layers(int(cfg["num_hidden_layers"]))
        forward_states(model, [recs[0]["input_ids"]], layers)       # warm-up
        order, bare, cap = [], [], []
        for rep in range(a.reps):   # A B A B ...: both legs see the same machine, pair by pair
            t0 = time.perf_counter()
            for b in _batches(recs, a.batch_tokens): forward_states(model, [r["input_ids"] for r in b], layers)
            bare.append(time.perf_counter() - t0); order.append("bare")
            run = Path(tempfile.mkdtemp())
            with JsonlWriter(run/"validate/records.jsonl") as w:
                for r in recs: w.write(r)
            t0 = time.perf_counter()
            m = capture(run, name, batch_tokens=a.batch_tokens, progress=False)
            cap.append(time.perf_counter() - t0); order.append("capture")
        ratios = [b_ / c_ for b_, c_ in zip(bare, cap)]   # capture tokens/s over bare tokens/s, per pair
        med = statistics.median(ratios)
        st = m["storage"]
        print(f"{name}: {a.records} records, {ntok} tokens, aux layers {layers}, batch_tokens {a.batch_tokens}")
        print(f"  legs, in order: {' '.join(order)}")
        print(f"  bare forward : median {ntok / statistics.median(bare):9.1f} tokens/s")
        print(f"  capture      : median {ntok / statistics.median(cap):9.1f} tokens/s  (includes model load, finiteness checks, bf16, shard writes)")
        print(f"  ratio capture / bare: median {med:.3f}, spread {min(ratios):.3f}-{max(ratios):.3f} over {len(ratios)} pairs   (target >= 0.85)"
              + ("   note: above 1, so the machine was noisy between legs" if med > 1 else ""))
        print(f"  bytes/token: {st['bytes_per_token']} (minimum {st['minimum_bytes_per_token']}: 4*H*2 + 5)  "
              f"peak RSS so far {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
        results[name] = {"order": order, "ratios": ratios, "median": med}
    return results

if __name__ == "__main__": main()
