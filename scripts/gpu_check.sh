#!/usr/bin/env bash
# The day a GPU is lent (#33): one command, one summary table at the end. On one H100 its steps are capped at 10
# minutes together (cuda tier 300 s, bench 180 s, evaluate 120 s), after the set-up: the first set-up on a bare
# machine also downloads torch's CUDA wheel and its nvidia-* libraries (a few GB, network-bound).
#   1. set-up: scripts/setup.sh (.venv; on a machine where nvidia-smi sees a GPU it installs torch's CUDA wheel of the
#      pinned version, see there);
#   2. the cuda tier: pytest -m cuda (tests/test_cuda.py: the tiny main job on the GPU, bf16 training, torchrun over
#      NCCL; tests/test_eval_device.py: the GPU in float32 equals the CPU);
#   3. the real-shape Qwen3-8B drafter's training step (bench/real_shape_step.py: tokens/s, peak GPU memory, MFU) at
#      the shipped config's batch_tokens (halved until it fits);
#   4. evaluate (notebook 10c) on the tiny target on the device, a fresh drafter, four prompts.
#
#   bash scripts/gpu_check.sh            on the GPU machine, from a bare clone
#   bash scripts/gpu_check.sh --dry-run  its CPU part here: set-up only where .venv is missing, the cuda tier reported
#                                        as skipped, the bench on the CPU (1 step of 16 tokens, ~40 s, ~13 GiB RSS),
#                                        evaluate on the CPU
# Assumes: bash, python3 (≥ 3.11, with venv) and pip reaching PyPI (or a mirror in pip's config) for the first set-up;
# an NVIDIA driver for CUDA 12 (torch's CUDA wheel brings its own CUDA runtime). Nothing else is downloaded: the tiny
# target is built from a config, the real-shape drafter has random weights. Outputs and logs: $GPU_CHECK_OUT
# (default runs/gpu-check). Exit status: 0 when no step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
OUT=${GPU_CHECK_OUT:-runs/gpu-check}
mkdir -p "$OUT" && rm -rf "$OUT/evaluate"
ROWS="$OUT/summary.tsv"
: > "$ROWS"
PY=.venv/bin/python
failed=0
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$ROWS"; }   # step, status, seconds, figures
now() { date +%s; }
fmt() { $PY - "$@" <<'EOF'
import json, sys   # the last line of a log (one JSON object) through a format string
print(sys.argv[2].format(**json.loads(open(sys.argv[1]).read().splitlines()[-1])))
EOF
}

# 1. set-up
t=$(now)
if [ "$DRY" = 1 ] && [ -x "$PY" ]; then
    row "set-up" "kept" 0 "dry run: the existing .venv"
elif bash scripts/setup.sh > "$OUT/setup.log" 2>&1; then
    row "set-up" "ok" $(( $(now) - t )) \
        "$($PY -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)')"
else
    row "set-up" "FAILED" $(( $(now) - t )) "see $OUT/setup.log"
    failed=1
fi
GPU=$($PY -c 'import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else "")' 2>/dev/null)
DEV=cpu
[ -n "$GPU" ] && [ "$DRY" = 0 ] && DEV=cuda

# 2. the cuda tier
t=$(now)
if [ "$DEV" = cpu ]; then
    row "cuda tier" "skipped" 0 "$([ "$DRY" = 1 ] && echo 'dry run' || echo 'torch sees no CUDA GPU')"
else
    timeout 300 $PY -m pytest tests/ -q -rs -m cuda -p no:cacheprovider > "$OUT/cuda-tier.log" 2>&1
    rc=$?
    res=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' "$OUT/cuda-tier.log" | tail -1 | tr -d '=' | xargs)
    [ "$rc" = 0 ] && st=ok || { st=FAILED; failed=1; }
    [ "$rc" = 124 ] && res="timed out after 300 s; $res"
    row "cuda tier" "$st" $(( $(now) - t )) "${res:-see $OUT/cuda-tier.log} on $GPU"
fi

# 3. the real-shape Qwen3-8B drafter's training step
t=$(now)
if [ "$DEV" = cpu ]; then BENCH=(--device cpu --seq-len 16 --batch-tokens 16 --steps 1 --warmup 0)
else BENCH=(--device cuda --steps 3 --warmup 1); fi
if timeout 180 $PY bench/real_shape_step.py "${BENCH[@]}" > "$OUT/real-shape-step.log" 2>&1; then
    fig=$(fmt "$OUT/real-shape-step.log" "{device} {dtype}: {tokens_per_step} tokens/step ({records} x {seq_len}, \
K={ttt_steps}), {tokens_per_s} tok/s, peak {peak_kind} {peak_gib} GiB, MFU {mfu}")
    row "real-shape Qwen3-8B step" "ok" $(( $(now) - t )) "$fig"
else
    row "real-shape Qwen3-8B step" "FAILED" $(( $(now) - t )) "see $OUT/real-shape-step.log"
    failed=1
fi

# 4. evaluate on the tiny target, on the device
t=$(now)
if timeout 120 $PY - "$OUT/evaluate" "$DEV" > "$OUT/evaluate.log" 2>&1 <<'EOF'
import json, sys, time
from pathlib import Path
from eagle3nb.drafter import new_drafter, save_drafter
from eagle3nb.evaluate import evaluate
from eagle3nb.models import load_target
run, device = Path(sys.argv[1]), sys.argv[2]
tgt = load_target("tiny-llama")
save_drafter(new_drafter(tgt, list(range(0, 4000, 2)), [2, 4, 5]).eval(), run/"train/drafter")
texts = ["1 2 3 4 5 6", "The capital of France is", "a b a b a b", "Why is the sky blue"]
(run/"prompts.jsonl").write_text("".join(json.dumps({"id": str(i), "prompt_ids": tgt.tokenizer.encode(t)}) + "\n"
                                         for i, t in enumerate(texts)))
t0 = time.perf_counter()
r = evaluate(run, run/"prompts.jsonl", ks=[1, 3], max_new_tokens=32, progress=False, device=device, batch_size=2)
c = r["config"]
assert c["device"].startswith(device), c
print(json.dumps({"device": c["device"], "dtype": c["dtype"], "prompts": len(texts),
                  "seconds": round(time.perf_counter() - t0, 1)}))
EOF
then
    fig=$(fmt "$OUT/evaluate.log" "tiny-llama on {device} ({dtype}), {prompts} prompts, K = 1 and 3, batch 2: \
{seconds} s")
    row "evaluate (tiny target)" "ok" $(( $(now) - t )) "$fig"
else
    row "evaluate (tiny target)" "FAILED" $(( $(now) - t )) "see $OUT/evaluate.log"
    failed=1
fi

# the summary: one table
echo
echo "gpu_check$([ "$DRY" = 1 ] && echo ' --dry-run') on $(uname -n), $(date -u '+%Y-%m-%d %H:%M UTC'), ${GPU:-no GPU}"
python3 - "$ROWS" <<'EOF'
import sys
rows = [("step", "status", "s", "figures")] + [tuple(l.rstrip("\n").split("\t")) for l in open(sys.argv[1])]
w = [max(len(r[i]) for r in rows) for i in range(3)]
for i, r in enumerate(rows):
    print(f"| {r[0]:<{w[0]}} | {r[1]:<{w[1]}} | {r[2]:>{w[2]}} | {r[3]}")
    if i == 0: print(f"|{'-' * (w[0] + 2)}|{'-' * (w[1] + 2)}|{'-' * (w[2] + 2)}|{'-' * 10}")
EOF
exit $failed
