"""Capture throughput vs the bare forward pass that computes the same hidden states, side by side in one run.

Both run the same model over the same length-sorted batches: the bare pass stops at the tensors;
capture also slices per sample, checks finiteness, converts to bf16 and writes safetensors shards
and their index. Prints tokens/s of each, the ratio (target >= 0.85), bytes/token against the
physical minimum, and peak RSS. On the tiny target and on SmolLM2.

    .venv/bin/python bench/capture_throughput.py [--records 64] [--targets tiny-llama,smollm2]
"""
import argparse, resource, tempfile, time
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

def main():
    from eagle3nb.capture import _batches, capture, default_aux_layers, forward_states
    from eagle3nb.core import JsonlWriter
    from eagle3nb.models import load_target
    ap = argparse.ArgumentParser(); ap.add_argument("--records", type=int, default=64)
    ap.add_argument("--targets", default="tiny-llama,smollm2"); ap.add_argument("--batch-tokens", type=int, default=4096)
    a = ap.parse_args()
    for name in a.targets.split(","):
        tgt = load_target(name); cfg = tgt.config()
        recs = records(a.records, int(cfg["vocab_size"]))
        ntok = sum(len(r["input_ids"]) for r in recs)
        model = tgt.load_model()
        layers = default_aux_layers(int(cfg["num_hidden_layers"]))
        forward_states(model, [recs[0]["input_ids"]], layers)       # warm-up
        res = {"bare": [], "capture": []}
        for rep in range(2):   # interleaved, best of two
            t0 = time.perf_counter()
            for b in _batches(recs, a.batch_tokens): forward_states(model, [r["input_ids"] for r in b], layers)
            res["bare"].append(time.perf_counter() - t0)
            run = Path(tempfile.mkdtemp())
            with JsonlWriter(run/"validate/records.jsonl") as w:
                for r in recs: w.write(r)
            t0 = time.perf_counter()
            m = capture(run, name, batch_tokens=a.batch_tokens, progress=False)
            res["capture"].append(time.perf_counter() - t0)
        bare, cap = min(res["bare"]), min(res["capture"])
        st = m["storage"]
        print(f"{name}: {a.records} records, {ntok} tokens, aux layers {layers}, batch_tokens {a.batch_tokens}")
        print(f"  bare forward : {ntok / bare:9.1f} tokens/s")
        print(f"  capture      : {ntok / cap:9.1f} tokens/s  (includes model load, finiteness checks, bf16, shard writes)")
        print(f"  ratio capture / bare: {bare / cap:.3f}   (target >= 0.85)")
        print(f"  bytes/token: {st['bytes_per_token']} (minimum {st['minimum_bytes_per_token']}: 4*H*2 + 5)  "
              f"peak RSS so far {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")

if __name__ == "__main__": main()
