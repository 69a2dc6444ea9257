("Evaluate on the configured device and dtype: several prompts in flight give each prompt's own counters, a target "
 "too large for one process is refused before loading, and (cuda tier) the GPU in float32 equals the CPU.")
import json, shutil
import pytest
import torch
from quick_drafter import fit_drafter
from eagle3nb.core import InputError
from eagle3nb.models import eos_ids, load_target
from eagle3nb.costs import check_fits, drafter_to, param_count, resolve_device
from eagle3nb.decode import run_prompts, spec_decode, spec_decode_batch
from eagle3nb.evaluate import evaluate

NEW = ["Another new prompt here", "Why is the sky blue", "Count: 1 1 2 3 5 8", "a b a b a b"]
COUNTERS = ("drafts", "draft_tokens", "accepted", "accepted_per_pos", "target_forwards", "output_tokens")
KIMI = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
        "text_config": {"hidden_size": 7168, "vocab_size": 163840, "num_hidden_layers": 61, "num_attention_heads": 64,
                        "num_key_value_heads": 64, "intermediate_size": 18432, "moe_intermediate_size": 2048,
                        "n_routed_experts": 384, "n_shared_experts": 1, "first_k_dense_replace": 1,
                        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                        "v_head_dim": 128, "tie_word_embeddings": False, "dtype": "bfloat16"}}

def counters(st) -> tuple: return tuple(getattr(st, n) for n in COUNTERS)

@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen3"])
def fitted(request):
    "A drafter that accepts, its engine, and 8 prompts (4 it was fitted on, 4 new)."
    d, eng, prompts, _ = fit_drafter(request.param, steps=50)
    return d, eng, prompts[:4] + [eng.target.tokenizer.encode(s) for s in NEW]

def test_batch_equals_one_at_a_time(fitted, request):
    ("batch_size 4 vs 1 on CPU float32: every prompt's output and counters identical, a stop token and max tokens "
     "included. Every K on tiny-llama; one K per method on tiny-qwen3 (its architecture's batched path, at a third of "
     "the time).")
    d, eng, prompts = fitted
    every_k = request.node.callspec.params["fitted"] == "tiny-llama"
    model, eos = eng.model, eos_ids(eng.target.path, eng.target.tokenizer)
    base = [spec_decode(model, p, 40, eos, method=None)[0] for p in prompts]
    # A token the first output emits mid-way as the stop: that row ends on it, the others at max tokens, together
    # (the tiny targets never emit their EOS in 40 tokens: a pass with it would be the all-at-max-tokens case alone)
    stop = [base[0][17]]
    ends = [b.index(stop[0]) + 1 if stop[0] in b else len(b) for b in base]   # where each row ends at that stop
    assert min(ends) < 40 and ends.count(40) >= 2, ends  # both endings, rows ending at different steps
    for method, ks in (("eagle3", (1, 3, 5) if every_k else (3,)), ("ngram", (2, 5) if every_k else (5,)),
                       (None, (0,))):
        for k in ks:
            one = [spec_decode(model, p, 40, stop, d, k=k, method=method, seed=i) for i, p in enumerate(prompts)]
            many = spec_decode_batch(model, prompts, 40, stop, d, k=k, method=method)
            assert [o for o, _ in many] == [o for o, _ in one], (method, k)
            assert [counters(s) for _, s in many] == [counters(s) for _, s in one], (method, k)
            if method == "eagle3": assert 0 < sum(s.accepted for _, s in one) < sum(s.draft_tokens for _, s in one)
    ps = [(str(i), p) for i, p in enumerate(prompts)]
    o1, s1 = run_prompts(model, ps, 40, eos, drafter=d, k=3)
    o4, s4 = run_prompts(model, ps, 40, eos, drafter=d, k=3, batch_size=4)
    o3, s3 = run_prompts(model, ps, 40, eos, drafter=d, k=3, batch_size=3)      # a last batch of two
    assert o1 == o4 == o3 and counters(s1) == counters(s4) == counters(s3)

def test_batch_sampling_seeded_per_prompt(fitted):
    "At T > 0 each row samples with its own prompt's generator: the same outputs as one prompt at a time."
    d, eng, prompts = fitted
    model = eng.model
    for greedy_draft in (True, False):
        one = [spec_decode(model, p, 24, [], d, k=3, temperature=0.8, seed=i, greedy_draft=greedy_draft)
               for i, p in enumerate(prompts)]
        many = spec_decode_batch(model, prompts, 24, [], d, k=3, temperature=0.8, greedy_draft=greedy_draft)
        assert [o for o, _ in many] == [o for o, _ in one]
        assert [counters(s) for _, s in many] == [counters(s) for _, s in one]

def _run_dir(tmp_path):
    "A run directory with a random drafter of tiny-llama and two held-out prompts."
    from eagle3nb.drafter import new_drafter, save_drafter
    tgt = load_target("tiny-llama")
    save_drafter(new_drafter(tgt, list(range(0, 4000, 2)), [2, 4, 5]).eval(), tmp_path/"train/drafter")
    ps = [tgt.tokenizer.encode(t) for t in ["1 2 3 4 5 6", "The capital of France is"]]
    (tmp_path/"p.jsonl").write_text("".join(json.dumps({"id": str(i), "prompt_ids": p}) + "\n"
                                            for i, p in enumerate(ps)))
    return tmp_path

def test_evaluate_batch_and_device(tmp_path):
    "evaluate with batch_size 2 = batch_size 1 (rows and every replayed K); the report says where and how it ran."
    run = _run_dir(tmp_path)
    kw = dict(ks=[1, 3], max_new_tokens=16, progress=False, device="cpu", dtype="auto")
    r1, r2 = evaluate(run, run/"p.jsonl", **kw), evaluate(run, run/"p.jsonl", batch_size=2, **kw)
    c = r2["config"]
    assert (c["device"], c["dtype"], c["batch_size"]) == ("cpu", "float32", 2) and c["weights_gib"] > 0
    strip = lambda rows: [{n: v for n, v in r.items() if n not in ("seconds", "tokens_per_s", "speedup",
                                                                  "expected_speedup")} for r in rows]   # clocks
    assert strip(r1["rows"]) == strip(r2["rows"])
    assert all(strip(r1["by_k"][m]) == strip(r2["by_k"][m]) for m in r1["by_k"])
    assert all(r["outputs_equal_target"] and r["prompts_equal_target"] == 2 for r in r2["rows"])

def test_resolve_device():
    "auto: a GPU in the target's dtype where one exists, else the CPU in float32; bad values refused."
    assert resolve_device("cpu", "auto", {"dtype": "bfloat16"}) == ("cpu", "float32")
    gpu = torch.cuda.is_available()
    want = ("cuda", "float16") if gpu else ("cpu", "float32")
    assert resolve_device("auto", "auto", {"torch_dtype": "float16"}) == want
    with pytest.raises(InputError, match="dtype"): resolve_device("cpu", "fp8")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="no CUDA"): resolve_device("cuda", "float32")
    d = drafter_to(load_target_drafter(), "cpu", "float16")
    assert d.lm_head.weight.dtype == torch.float16 and d.rotary.rope.inv_freq.dtype == torch.float32

def load_target_drafter():
    from eagle3nb.drafter import new_drafter
    return new_drafter(load_target("tiny-llama"), list(range(0, 4000, 2)), [2, 4, 5])

def test_param_count_matches_real_models():
    "The config estimate equals the real parameter count of the tiny Llama and Qwen3 (Qwen3's q/k norms aside)."
    from transformers import AutoConfig, AutoModelForCausalLM
    for name, tol in (("tiny-llama", 0), ("tiny-qwen3", 1e-3)):
        t = load_target(name)
        with torch.device("meta"): m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(t.path))
        real = sum(p.numel() for p in m.parameters())
        assert abs(param_count(t.config()) - real) <= tol * real, (name, param_count(t.config()), real)

def test_huge_target_refused_before_loading(tmp_path):
    ("Kimi-K2.5's shapes (~1 T parameters): refused with a clear InputError naming both sizes and the server route; "
     "through evaluate, before any weight is read (the target directory has none).")
    n = param_count(KIMI)
    assert 1.0e12 < n < 1.1e12
    with pytest.raises(InputError) as e: check_fits(KIMI, "bfloat16", "cuda", available=141 * 2**30)
    msg = str(e.value)
    assert f"{2 * n / 2**30:,.0f} GiB" in msg and "141 GiB" in msg and "vLLM" in msg and "SGLang" in msg, msg
    assert "/metrics" in msg
    assert check_fits({**KIMI["text_config"], "num_hidden_layers": 2, "n_routed_experts": 0}, "bfloat16", "cpu",
                      available=2**40) > 0
    huge = tmp_path/"huge-target"          # tiny-llama's tokenizer and a config of Kimi-K2's shapes, no weights
    shutil.copytree(load_target("tiny-llama").path, huge, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    cfg = json.loads((huge/"config.json").read_text())
    (huge/"config.json").write_text(json.dumps({**cfg, **KIMI["text_config"], "vocab_size": cfg["vocab_size"]}))
    run = _run_dir(tmp_path/"run")           # tiny-llama's drafter, pointed at the huge target
    dcfg = json.loads((run/"train/drafter/config.json").read_text())
    dcfg["eagle3nb_drafter"]["target"] = str(huge)
    (run/"train/drafter/config.json").write_text(json.dumps(dcfg))
    for device in ("cpu", "auto"):
        with pytest.raises(InputError, match="one process cannot hold"):
            evaluate(run, run/"p.jsonl", ks=[1], max_new_tokens=4, progress=False, device=device)
    assert not (run/"evaluate").exists()

@pytest.mark.cuda
@pytest.mark.parametrize("batch_size", [1, 4])
def test_cuda_float32_equals_cpu(fitted, batch_size):
    "The same loop on the GPU in float32: outputs and counters equal the CPU float32 run, prompt by prompt."
    import copy
    d, eng, prompts = fitted
    eos = eos_ids(eng.target.path, eng.target.tokenizer)
    mc, dc = copy.deepcopy(eng.model).to("cuda"), drafter_to(copy.deepcopy(d), "cuda", "float32")
    ps = [(str(i), p) for i, p in enumerate(prompts)]
    for method, k in (("eagle3", 3), ("eagle3", 5), ("ngram", 4), (None, 0)):
        want, ws = run_prompts(eng.model, ps, 40, eos, drafter=d, k=k, method=method)
        got, gs = run_prompts(mc, ps, 40, eos, drafter=dc, k=k, method=method, batch_size=batch_size)
        assert got == want and counters(gs) == counters(ws), (method, k)

@pytest.mark.cuda
def test_cuda_evaluate(tmp_path):
    ("evaluate on CUDA: float32 equals the CPU report; bfloat16 (auto dtype of a bf16 target) runs, checked against "
     "its own greedy output.")
    run = _run_dir(tmp_path)
    kw = dict(ks=[1, 3], max_new_tokens=16, progress=False, batch_size=2)
    cpu, gpu = (evaluate(run, run/"p.jsonl", device=dv, dtype="float32", **kw) for dv in ("cpu", "cuda"))
    strip = lambda rows: [{n: v for n, v in r.items() if n not in ("seconds", "tokens_per_s", "speedup",
                                                                  "expected_speedup")} for r in rows]   # clocks
    assert strip(gpu["rows"]) == strip(cpu["rows"])
    assert all(strip(gpu["by_k"][m]) == strip(cpu["by_k"][m]) for m in cpu["by_k"])
    bf = evaluate(run, run/"p.jsonl", device="cuda", dtype="bfloat16", **kw)
    assert (bf["config"]["device"], bf["config"]["dtype"]) == ("cuda", "bfloat16")
    assert bf["config"]["lossless_reference"].startswith("the target alone, bfloat16 on cuda")
    assert all(0 <= r["prompts_equal_target"] <= 2 for r in bf["rows"])
