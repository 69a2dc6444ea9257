"""Drafter training throughput on SmolLM2-135M's drafter size: tokens/s, peak RSS and model FLOPs utilisation
(achieved FLOP/s of the training step ÷ FLOP/s of a plain torch.matmul of the drafter's largest shape, measured in the
same run) for K = 1, 3, 7; then time per step at draft vocab N = 8k, 16k, 32k and the full vocabulary.

    .venv/bin/python bench/train_throughput.py [--tokens 2048] [--steps 3]

Each configuration runs in its own process (so peak RSS is its own); inputs are random tensors of the real shapes
(the step's cost does not depend on the values), the teacher is SmolLM2's real lm_head."""
import argparse, json, resource, subprocess, sys, time

def flops_per_step(c, T, B, K, n_sup):
    "Model FLOPs of one training step (forward + backward = 3x forward) of the drafter, and of the teacher."
    H, I, d, nh, nkv, N = c.hidden_size, c.intermediate_size, c.head_dim, c.num_attention_heads, c.num_key_value_heads, c.draft_vocab_size
    tok = B * T
    layer = 2 * (2 * H * (nh + 2 * nkv) * d + nh * d * H + 3 * H * I)          # projections + MLP per token
    attn = 2 * 2 * nh * d * (T / 2)                                            # causal scores + weighted sum per token
    fwd = 2 * 3 * H * H * tok + K * (layer + attn) * tok + sum(2 * H * N * n for n in n_sup)
    return 3 * fwd

def one(args):
    import torch
    from eagle3nb.models import load_target
    from eagle3nb.drafter import new_drafter, target_lm_head
    from eagle3nb.train import Batch, TrainConfig, Teacher, train_step, plan_steps
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
    tc = TrainConfig(ttt_steps=args.k)
    opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=1e-4)
    n_sup = [int(p.b.numel()) for p in plan_steps(batch, teacher, args.k)]
    train_step(d, opt, batch, teacher, tc)                      # warm-up
    t0 = time.perf_counter()
    for _ in range(args.steps): train_step(d, opt, batch, teacher, tc)
    dt = (time.perf_counter() - t0) / args.steps
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
    print(json.dumps({"K": args.k, "N": N, "tokens": B * T, "s_per_step": round(dt, 3),
                      "tokens_per_s": round(B * T / dt, 1),
                      "teacher_share": round(dt_teacher / dt, 3), "achieved_gflops": round(f / dt / 1e9, 1),
                      "matmul_gflops": round(mm / 1e9, 1), "mfu": round(f / dt / mm, 3),
                      "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--n", type=int, default=None)
    args = ap.parse_args()
    if args.k is not None: return one(args)
    import torch
    print(f"drafter training on SmolLM2-135M's drafter size, {args.tokens} tokens per step, "
          f"{torch.get_num_threads()} threads")
    runs = [(k, 32000) for k in (1, 3, 7)] + [(7, n) for n in (8192, 16384, 0)]
    for k, n in runs:
        r = subprocess.run([sys.executable, __file__, "--k", str(k), "--n", str(n), "--tokens", str(args.tokens),
                            "--steps", str(args.steps)],
                           capture_output=True, text=True)
        line = [l for l in r.stdout.splitlines() if l.startswith("{")]
        if not line:
            print(f"K={k} N={n}: failed\n{r.stderr[-2000:]}")
            continue
        o = json.loads(line[-1])
        print(f"K={o['K']} N={o['N']:>6}: {o['s_per_step']:.2f} s/step, {o['tokens_per_s']:.0f} tok/s, MFU {o['mfu']:.2f} "
              f"({o['achieved_gflops']} GFLOP/s of {o['matmul_gflops']} matmul GFLOP/s), teacher {o['teacher_share']:.0%} of the step, "
              f"peak RSS {o['peak_rss_gib']} GiB")

if __name__ == "__main__": main()
