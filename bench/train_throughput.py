"""Drafter training throughput and memory on SmolLM2-135M's drafter size: tokens/s, peak RSS and model FLOPs utilisation
(achieved FLOP/s of the training step ÷ FLOP/s of a plain torch.matmul of the drafter's largest shape, measured in the
same run) for K = 1, 3, 7; then draft vocab N = 8k, 16k and the full vocabulary at K = 7. Every configuration runs
twice, unchunked (`loss_chunk=0`, every step's `[slots, N]` logits kept for the backward pass) and chunked (the
default `loss_chunk`, each chunk's logits recomputed in the backward pass), and the two are printed side by side.

    .venv/bin/python bench/train_throughput.py [--tokens 2048] [--steps 3] [--runs 7:32000] [--chunks 0,1024]

Each configuration runs in its own process (so peak RSS is its own; the step's own peak is the peak RSS above the RSS
just before the first step); inputs are random tensors of the real shapes (the step's cost does not depend on the
values), the teacher is SmolLM2's real lm_head."""
import argparse, json, resource, subprocess, sys, time

RUNS = "1:32000,3:32000,7:32000,7:8192,7:16384,7:0"   # K:N, N = 0: the full vocabulary

def flops_per_step(c, T, B, K, n_sup):
    "Model FLOPs of one training step (forward + backward = 3x forward) of the drafter, and of the teacher."
    H, I, d, N = c.hidden_size, c.intermediate_size, c.head_dim, c.draft_vocab_size
    nh, nkv = c.num_attention_heads, c.num_key_value_heads
    tok = B * T
    layer = 2 * (2 * H * (nh + 2 * nkv) * d + nh * d * H + 3 * H * I)          # projections + MLP per token
    attn = 2 * 2 * nh * d * (T / 2)                                            # causal scores + weighted sum per token
    fwd = 2 * 3 * H * H * tok + K * (layer + attn) * tok + sum(2 * H * N * n for n in n_sup)
    return 3 * fwd

def rss_gib() -> float:
    "This process's resident memory now."
    import os
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30

def peak_gib() -> float: return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20

def one(args):
    import torch
    from eagle3nb.models import load_target
    from eagle3nb.drafter import new_drafter, target_lm_head
    from eagle3nb.sources import Batch
    from eagle3nb.train import TrainConfig, Teacher, train_step, plan_steps
    tgt = load_target("smollm2")
    cfg = tgt.config()
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    N = V if args.n == 0 else args.n
    ids = list(range(N))
    d = new_drafter(tgt, ids, [2, 15, 27])
    W = target_lm_head(tgt.path)
    teacher = Teacher(W, ids)
    B, T = args.tokens // 512, 512
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, N, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[:, :64] = 0
    batch = Batch([str(i) for i in range(B)], x, torch.randn(B, T, 3 * H, generator=g),
                  torch.randn(B, T, H, generator=g), mask, [T] * B)
    tc = TrainConfig(ttt_steps=args.k, loss_chunk=args.chunk)
    opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=1e-4)
    n_sup = [int(p.b.numel()) for p in plan_steps(batch, teacher, args.k)]
    before = rss_gib()
    train_step(d, opt, batch, teacher, tc)                      # warm-up
    t0 = time.perf_counter()
    for _ in range(args.steps): train_step(d, opt, batch, teacher, tc)
    dt = (time.perf_counter() - t0) / args.steps
    step_peak = peak_gib() - before
    t0 = time.perf_counter()
    for _ in range(args.steps): plan_steps(batch, teacher, args.k)
    dt_teacher = (time.perf_counter() - t0) / args.steps
    # the drafter's largest matmul: [tokens, H] x [H, N] (lm_head)
    a, b = torch.randn(B * T, H), torch.randn(H, N)
    a @ b
    t0 = time.perf_counter()
    for _ in range(3): a @ b
    mm = 2 * B * T * H * N * 3 / (time.perf_counter() - t0)
    f = flops_per_step(d.config, T, B, args.k, n_sup)
    print(json.dumps({"K": args.k, "N": N, "chunk": args.chunk, "tokens": B * T, "s_per_step": round(dt, 3),
                      "tokens_per_s": round(B * T / dt, 1),
                      "teacher_share": round(dt_teacher / dt, 3), "achieved_gflops": round(f / dt / 1e9, 1),
                      "matmul_gflops": round(mm / 1e9, 1), "mfu": round(f / dt / mm, 3),
                      "peak_rss_gib": round(peak_gib(), 2), "step_peak_gib": round(step_peak, 2)}))

def child(k:int, n:int, chunk:int, args) -> dict|None:
    "One configuration in its own process; its JSON line, or None (the error printed)."
    r = subprocess.run([sys.executable, __file__, "--k", str(k), "--n", str(n), "--chunk", str(chunk),
                        "--tokens", str(args.tokens), "--steps", str(args.steps)], capture_output=True, text=True)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if not line: print(f"K={k} N={n} loss_chunk={chunk}: failed\n{r.stderr[-2000:]}")
    return json.loads(line[-1]) if line else None

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--runs", default=RUNS, help="K:N pairs, comma-separated (N = 0: the full vocabulary)")
    ap.add_argument("--chunks", default=None, help="loss_chunk values compared (default: 0 and TrainConfig's)")
    ap.add_argument("--k", type=int, default=None)       # a child: one configuration
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--chunk", type=int, default=0)
    args = ap.parse_args()
    if args.k is not None: return one(args)
    import torch
    from eagle3nb.train import TrainConfig
    chunks = [int(c) for c in args.chunks.split(",")] if args.chunks else [0, TrainConfig().loss_chunk]
    print(f"drafter training on SmolLM2-135M's drafter size, {args.tokens} tokens per step, "
          f"{torch.get_num_threads()} threads, {args.steps} timed steps after one warm-up")
    for run in args.runs.split(","):
        k, n = map(int, run.split(":"))
        rs = [child(k, n, c, args) for c in chunks]
        for o in filter(None, rs):
            print(f"K={o['K']} N={o['N']:>6} loss_chunk={o['chunk']:>5}: {o['s_per_step']:.2f} s/step, "
                  f"{o['tokens_per_s']:.0f} tok/s, MFU {o['mfu']:.2f} ({o['achieved_gflops']} GFLOP/s of "
                  f"{o['matmul_gflops']} matmul GFLOP/s), teacher {o['teacher_share']:.0%} of the step, "
                  f"peak RSS {o['peak_rss_gib']} GiB (the step's own {o['step_peak_gib']} GiB)")
        if len(rs) > 1 and all(rs):
            a, b = rs[0], rs[-1]
            print(f"  loss_chunk {b['chunk']} vs {a['chunk']}: tokens/s x{b['tokens_per_s'] / a['tokens_per_s']:.2f}, "
                  f"peak RSS x{b['peak_rss_gib'] / a['peak_rss_gib']:.2f}, "
                  f"the step's own peak x{b['step_peak_gib'] / max(a['step_peak_gib'], 1e-9):.2f}")

if __name__ == "__main__": main()
