"""Training throughput of the Qwen3-8B drafter at its TRUE shape (hidden 4096, 32/8 heads, vocabulary 151,936, draft
vocabulary 32,000, K = 7 as configs/qwen3-8b-sglang.toml says) on any device: eagle3nb's own `train_step` (TTT loss,
backward, gradient path, AdamW) on random hidden states of the right width; tokens/s, peak memory (GPU: the allocator's
peak; CPU: peak RSS) and MFU = the step's model FLOP/s ÷ the FLOP/s of a plain matmul of the drafter's largest shape
(`[tokens, H] × [H, N]`, in the step's dtype) measured in the same process (bench/train_throughput.py's definition).

    .venv/bin/python bench/real_shape_step.py [--device auto|cpu|cuda] [--seq-len 4096] [--batch-tokens 65536]

With no `--batch-tokens` the shipped config's `[train] batch_tokens` is tried first; on a GPU out of memory it is
halved until a step fits (the line says which fitted). The last line printed is one JSON object (for scripts)."""
import argparse, json, resource, sys, time, tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT/"tests"), str(ROOT/"bench")]

def peak_rss_gib() -> float: return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20

def setup(args, device):
    "The drafter at true shape, its teacher and AdamW on `device` (random weights: the step's cost is the same)."
    import torch
    from real_shapes import TARGETS
    from eagle3nb.capture import default_aux_layers
    from eagle3nb.drafter import Drafter, drafter_config
    from eagle3nb.train import Teacher
    tcfg = TARGETS[args.config]
    train = tomllib.loads((ROOT/args.config).read_text())["train"]
    N = train.get("draft_vocab_size", 32000)
    torch.manual_seed(0)
    with torch.device(device):
        d = Drafter(drafter_config(tcfg, N, default_aux_layers(tcfg["num_hidden_layers"])))
        teacher = Teacher(torch.randn(tcfg["vocab_size"], tcfg["hidden_size"]).mul_(0.02),
                          torch.randperm(tcfg["vocab_size"])[:N].sort().values)
    opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=1e-4)
    return d, teacher, opt, train

def batch_of(d, tokens:int, seq_len:int, device):
    "`tokens` random tokens as `tokens // seq_len` records, the first 64 positions of each unsupervised."
    import torch
    from eagle3nb.sources import Batch
    B, T, c = max(1, tokens // seq_len), min(seq_len, tokens), d.config
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[:, :min(64, T // 2)] = 0
    aux, final = torch.randn(B, T, 3 * c.target_hidden_size, generator=g), torch.randn(B, T, c.hidden_size, generator=g)
    return Batch([str(i) for i in range(B)], torch.randint(0, c.vocab_size, (B, T), generator=g), aux, final, mask,
                 [T] * B).to(device)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/qwen3-8b-sglang.toml", help="a shipped config (tests/real_shapes.py)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--batch-tokens", type=int, default=None, help="default: the config's [train] batch_tokens")
    ap.add_argument("--steps", type=int, default=3, help="timed steps")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--ttt-steps", type=int, default=None, help="default: the config's [train] ttt_steps")
    args = ap.parse_args()
    import torch
    from train_throughput import flops_per_step
    from eagle3nb.train import TrainConfig, plan_steps, train_step, use_bf16
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    cuda = device.startswith("cuda")
    d, teacher, opt, train = setup(args, device)
    tc = TrainConfig(ttt_steps=args.ttt_steps or train.get("ttt_steps", 7), bf16="gpu")
    bf16 = use_bf16(tc.bf16, device)
    tokens = args.batch_tokens or train.get("batch_tokens", 65536)
    while True:
        batch = batch_of(d, tokens, args.seq_len, device)
        try:
            if cuda: torch.cuda.reset_peak_memory_stats()
            for _ in range(args.warmup): train_step(d, opt, batch, teacher, tc)
            if cuda: torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.steps): train_step(d, opt, batch, teacher, tc)
            if cuda: torch.cuda.synchronize()
            break
        except torch.OutOfMemoryError:
            if not cuda or tokens <= args.seq_len: raise
            print(f"{tokens} tokens a step: out of GPU memory; halving")
            del batch
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            tokens //= 2
    dt = (time.perf_counter() - t0) / args.steps
    B, T = batch.input_ids.shape
    n_sup = [int(p.b.numel()) for p in plan_steps(batch, teacher, tc.ttt_steps)]
    f = flops_per_step(d.config, T, B, tc.ttt_steps, n_sup)
    dt_mm = torch.bfloat16 if bf16 else torch.float32
    a = torch.randn(B * T, d.config.hidden_size, device=device, dtype=dt_mm)
    w = torch.randn(d.config.hidden_size, d.config.draft_vocab_size, device=device, dtype=dt_mm)
    a @ w
    if cuda: torch.cuda.synchronize()
    t1 = time.perf_counter()
    for _ in range(3): a @ w
    if cuda: torch.cuda.synchronize()
    mm = 2 * B * T * d.config.hidden_size * d.config.draft_vocab_size * 3 / (time.perf_counter() - t1)
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else peak_rss_gib()
    out = {"config": args.config, "device": torch.cuda.get_device_name() if cuda else "cpu",
           "dtype": "bf16 autocast" if bf16 else "float32",
           "params_b": round(sum(p.numel() for p in d.parameters()) / 1e9, 3), "tokens_per_step": B * T,
           "records": B, "seq_len": T, "ttt_steps": tc.ttt_steps, "s_per_step": round(dt, 3),
           "tokens_per_s": round(B * T / dt, 1), "peak_gib": round(peak, 2),
           "peak_kind": "GPU allocated" if cuda else "RSS", "achieved_tflops": round(f / dt / 1e12, 2),
           "matmul_tflops": round(mm / 1e12, 2), "mfu": round(f / dt / mm, 3)}
    print(f"real-shape drafter step, {args.config} on {out['device']} ({out['dtype']}): "
          f"{out['tokens_per_step']} tokens ({B} x {T}), K={tc.ttt_steps}: {out['s_per_step']} s/step, "
          f"{out['tokens_per_s']} tok/s, peak "
          f"{out['peak_kind']} {out['peak_gib']} GiB, MFU {out['mfu']} ({out['achieved_tflops']} of "
          f"{out['matmul_tflops']} matmul TFLOP/s)")
    print(json.dumps(out))

if __name__ == "__main__": main()
