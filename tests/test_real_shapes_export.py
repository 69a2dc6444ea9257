"""Exports at the shipped configs' TRUE shapes (#33 item 3): a drafter built from each target's config.json
(tests/real_shapes.py: Qwen3-8B, Kimi-K2.5) with random weights, both layouts written, each config.json read field by
field the way vLLM's and SGLang's EAGLE-3 loaders read it (`engine_reads`, notebook 11_export, source lines cited
there), the tensor names and shapes replayed through each loader's `load_weights`, and the speculators layout read by
the real `speculators` 0.9 package with bit-equal logits.

Tier: `make test-slow` (marked `real_shapes` and `slow`; the speculators test also `speculators`, and the Makefile
sets EAGLE3NB_SPECULATORS_PYTHON for it). float32: the Kimi-shaped drafter is 2.4 B parameters, 9.4 GB in float32,
freed before the speculators process loads its own copy, so the peak stays near one copy (~10 GB)."""
import gc, json, os, resource, shutil, subprocess, sys, time
import pytest
import torch
from pathlib import Path
from safetensors import safe_open
from real_shapes import KIMI_K25, QWEN3_8B
from eagle3nb.capture import default_aux_layers
from eagle3nb.drafter import Drafter, Rotary, drafter_config
from eagle3nb.export import engine_reads, export_sglang, export_speculators, read_mismatches
from eagle3nb.models import sglang_layer_ids

pytestmark = [pytest.mark.real_shapes, pytest.mark.slow]

N, T, STEPS, THREADS = 32000, 16, 3, 2   # draft vocabulary of both shipped configs; a short sequence, K = 3 steps
CONFIGS = {"qwen3-8b": QWEN3_8B, "kimi-k2.5": KIMI_K25}

# What each target's drafter must be, written from the targets' config.json (tests/real_shapes.py) and, for Kimi,
# the published drafters (SpecForge configs/kimi-k2-eagle3.json, TorchSpec configs/draft_models/kimi_k25_eagle3.json:
# 64 heads of 128, no rope scaling): (H, heads, KV heads, head_dim, I, V, eps, rope_theta, aux ids HF)
EXPECTED = {"qwen3-8b": (4096, 32, 8, 128, 12288, 151936, 1e-6, 1e6, [2, 18, 33]),
            "kimi-k2.5": (7168, 64, 64, 128, 18432, 163840, 1e-5, 5e4, [2, 30, 58])}

def verifier_dir(path, tcfg:dict):
    ("The target as `speculators` reads a verifier: its config.json and the three tensors it loads from it "
     "(embeddings, lm_head, final norm) at their true shapes in bfloat16, under the family's names; no layers. Their "
     "values do not matter here (speculators keeps the export's own embeddings and lm_head; the verifier's feed only "
     "its training loss), so they are zeros: no time spent drawing 2 x V x H random numbers.")
    from safetensors.torch import save_file
    path.mkdir()
    (path/"config.json").write_text(json.dumps(tcfg))
    text = tcfg.get("text_config", tcfg)
    V, H, pre = text["vocab_size"], text["hidden_size"], "language_model." if "text_config" in tcfg else ""
    save_file({f"{pre}model.embed_tokens.weight": torch.zeros(V, H, dtype=torch.bfloat16),
               f"{pre}lm_head.weight": torch.zeros(V, H, dtype=torch.bfloat16),
               f"{pre}model.norm.weight": torch.ones(H, dtype=torch.bfloat16)}, str(path/"model.safetensors"))
    gc.collect()
    return path

def peak_gib() -> float: return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20

@pytest.fixture(scope="module", params=list(CONFIGS))
def exported(request, tmp_path_factory):
    "A true-shape drafter (random weights) of one target: reference logits, both exports; the drafter itself freed."
    name, tcfg = request.param, CONFIGS[request.param]
    text = tcfg.get("text_config", tcfg)
    torch.set_num_threads(THREADS)
    out = tmp_path_factory.mktemp(name)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    target = verifier_dir(out/"target", tcfg)
    aux_layers = default_aux_layers(text["num_hidden_layers"])        # as the pipeline picks them
    with torch.device("meta"): d = Drafter(drafter_config(tcfg, N, aux_layers, str(target)))
    d = d.to_empty(device="cpu").eval()       # one fill per tensor below, not the default init and then ours (2x)
    d.rotary = Rotary(d.config)               # its inverse frequencies are computed, not stored
    V = d.config.vocab_size
    with torch.no_grad():
        for p in d.parameters():   # norms not all ones (a misplaced one shows), matrices at the default init's scale
            if p.dim() == 1: p.normal_(1.0, 0.1)
            else: p.uniform_(-p.shape[1] ** -0.5, p.shape[1] ** -0.5)
        ids = torch.randperm(V)[:N].sort().values                       # a draft vocabulary spread over the target's
        d.d2t.copy_(ids - torch.arange(N))
        d.t2d.zero_()
        d.t2d[ids] = True
        x = torch.randint(0, V, (1, T))
        aux = torch.randn(1, T, 3 * d.config.target_hidden_size)
        ref = [d.logits(s) for s in d.ttt_forward(x, aux, [T], STEPS)]
    params = sum(p.numel() for p in d.parameters())
    built = time.perf_counter() - t0
    spec, sgl = export_speculators(d, out/"speculators"), export_sglang(d, out/"sglang")
    c, to_target = d.config, d.to_target_ids(torch.arange(N))
    del d, p
    gc.collect()
    print(f"\nreal-shape export {name}: {params / 1e9:.2f} B parameters, built in {built:.0f} s, both layouts written "
          f"in {time.perf_counter() - t0 - built:.0f} s, peak RSS {peak_gib():.1f} GiB")
    yield dict(name=name, config=c, spec=spec, sglang=sgl, ref=ref, x=x, aux=aux, to_target=to_target)
    shutil.rmtree(out, ignore_errors=True)   # ~26 GB for Kimi-K2.5 (target, both layouts); pytest keeps 3 sessions'

def shapes(path) -> dict:
    "Tensor name → shape of a safetensors file, from its header (nothing loaded)."
    with safe_open(str(path/"model.safetensors"), "pt") as s:
        return {k: tuple(s.get_slice(k).get_shape()) for k in s.keys()}

STACKED = [(".q_proj", ".qkv_proj", "q"), (".k_proj", ".qkv_proj", "k"), (".v_proj", ".qkv_proj", "v"),
           (".gate_proj", ".gate_up_proj", 0), (".up_proj", ".gate_up_proj", 1)]

def engine_params(r:dict, layer:str) -> dict:
    "Parameter → shape of the drafter an engine builds from its reading `r` (`engine_reads`), layer under `layer`."
    H, I, d, nh, nkv = r["hidden_size"], r["intermediate_size"], r["head_dim"], r["num_attention_heads"], \
        r["num_key_value_heads"]
    p = {"model.embed_tokens.weight": (r["vocab_size"], H), "model.fc.weight": (H, 3 * r["target_hidden_size"]),
         f"{layer}.self_attn.qkv_proj.weight": ((nh + 2 * nkv) * d, 2 * H),
         f"{layer}.self_attn.o_proj.weight": (H, nh * d),
         f"{layer}.mlp.gate_up_proj.weight": (2 * I, H), f"{layer}.mlp.down_proj.weight": (H, I),
         f"{layer}.input_layernorm.weight": (H,), f"{layer}.hidden_norm.weight": (H,),
         f"{layer}.post_attention_layernorm.weight": (H,), "model.norm.weight": (H,),
         "lm_head.weight": (r["draft_vocab_size"], H)}
    if r["engine"] == "vllm" and r["draft_vocab_size"] != r["vocab_size"]:
        p["draft_id_to_target_id"] = (r["draft_vocab_size"],)
    return p

def vllm_names(names:list) -> dict:
    ("vLLM 0.32's renaming in `Eagle3LlamaForCausalLM.load_weights` (llama_eagle3.py:420-470), then `LlamaModel`'s "
     "mapper (llama_eagle3.py:290-303): checkpoint name → (parameter, shard); t2d skipped.")
    out = {}
    for n in names:
        if "t2d" in n: continue
        m = n.replace("d2t", "draft_id_to_target_id") if "d2t" in n else n if "lm_head" in n else "model." + n
        m, shard = m.replace("midlayer.", "layers.0."), None
        for old, new, s in STACKED:
            if old in m: m, shard = m.replace(old, new), s
        out[n] = (m, shard)
    return out

def sglang_names(names:list, params:dict) -> dict:
    ("SGLang's `LlamaForCausalLMEagle3.load_weights` (commit 03d5a77): checkpoint name → (parameter, shard); d2t "
     "becomes the hot-token map, t2d skipped; a name it cannot place is dropped silently (here: mapped to None).")
    out = {}
    for n in names:
        if "d2t" in n or "t2d" in n: continue
        m, shard = n, None
        for old, new, s in STACKED:
            if old in m: m, shard = m.replace(old, new), s
        m = m if m in params else f"model.{m}"
        out[n] = (m if m in params else None, shard)
    return out

def check_tensors(have:dict, mapping:dict, params:dict, skip:set=frozenset()):
    "Every tensor placed, with its parameter's shape (stacked shards summing to it); every parameter filled."
    dropped = [n for n, (m, _) in mapping.items() if m is None or m not in params]
    assert dropped == [], f"the loader cannot place {dropped}"
    filled = {}
    for n, (m, shard) in mapping.items(): filled.setdefault(m, []).append((shard, have[n]))
    assert set(params) - set(filled) == set(skip), set(params) - set(filled)
    for m, got in filled.items():
        if got[0][0] is None: assert got == [(None, params[m])], (m, got, params[m])
        else:
            assert sum(s[0] for _, s in got) == params[m][0] and all(s[1:] == params[m][1:] for _, s in got), (m, got)

def test_exports_read_field_by_field(exported):
    "Both layouts, read as each engine reads them, give the drafter trained; every tensor lands on a parameter."
    c, name = exported["config"], exported["name"]
    H, nh, nkv, hd, I, V, eps, theta, aux = EXPECTED[name]
    assert (c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.intermediate_size,
            c.vocab_size, c.rms_norm_eps, c.rope_theta, c.aux_layers_hf) == (H, nh, nkv, hd, I, V, eps, theta, aux)
    assert (c.draft_vocab_size, c.target_hidden_size, c.rope_scaling) == (N, H, None)
    spec = json.loads((exported["spec"]/"config.json").read_text())
    sgl = json.loads((exported["sglang"]/"config.json").read_text())
    for cfg in (spec, sgl):
        r = engine_reads(cfg)
        assert read_mismatches(c, r) == [], read_mismatches(c, r)
        assert (r["hidden_size"], r["num_attention_heads"], r["num_key_value_heads"], r["head_dim"],
                r["intermediate_size"], r["vocab_size"], r["draft_vocab_size"], r["target_hidden_size"],
                r["rms_norm_eps"], r["rope_theta"], r["rope_scaling"], r["aux_layers_hf"], r["layers"],
                r["hidden_act"], r["norm_before_residual"]) == (H, nh, nkv, hd, I, V, N, H, eps, theta, None, aux, 1,
                                                                  "silu", False), (r["engine"], r)
    # the raw keys, in each engine's convention (what a reader without eagle3nb's help sees)
    assert spec["eagle_aux_hidden_state_layer_ids"] == aux and spec["norm_before_residual"] is False
    assert sgl["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": sglang_layer_ids(aux),
                                   "use_aux_hidden_state": True}
    assert sgl["tie_word_embeddings"] is False and spec["transformer_layer_config"]["tie_word_embeddings"] is False
    for layer in (spec["transformer_layer_config"], sgl):
        assert layer["rope_parameters"] == {"rope_type": "default", "rope_theta": theta}
        assert layer["rope_scaling"] is None
        assert layer["torch_dtype"] == "float32" and layer["model_type"] == "llama"
    # tensors: names and shapes through each loader's load_weights
    vs, ss = shapes(exported["spec"]), shapes(exported["sglang"])
    rv, rs = engine_reads(spec), engine_reads(sgl)
    pv, ps = engine_params(rv, "model.layers.0"), engine_params(rs, "model.midlayer")
    check_tensors(vs, vllm_names(list(vs)), pv)
    check_tensors(ss, sglang_names(list(ss), ps), ps, skip={"model.embed_tokens.weight"})   # SGLang shares the target's
    assert vs["embed_tokens.weight"] == (V, H) and "embed_tokens.weight" not in ss
    assert vs["d2t"] == ss["d2t"] == (N,) and vs["t2d"] == ss["t2d"] == (V,)
    with safe_open(str(exported["sglang"]/"model.safetensors"), "pt") as s: d2t = s.get_tensor("d2t")
    assert torch.equal(d2t + torch.arange(N), exported["to_target"])     # the hot-token ids SGLang builds from it

READER = Path(__file__).parent/"speculators_reader.py"   # run by speculators' venv

@pytest.mark.speculators
def test_speculators_reads_true_shape_bit_equal(exported, tmp_path):
    ("speculators 0.9 loads the true-shape speculators export: every tensor bit-equal, and the logits of all K=3 "
     "training-time-test steps at all 16 positions bit-equal to eagle3nb's. float32 on both sides, the same torch "
     "build (2.13.0+cpu in both venvs), the same thread count and the same operations in the same order (SDPA with a "
     "boolean mask, RMSNorm in float32, rotate-half RoPE): nothing is left to round differently. In bfloat16 they are "
     "not bit-equal (measured on tiny-qwen3: up to 0.0078, one bf16 step, on about a fifth of the logits), so this "
     "test pins float32.")
    py = os.environ.get("EAGLE3NB_SPECULATORS_PYTHON")
    if not py: pytest.fail("EAGLE3NB_SPECULATORS_PYTHON is not set: run this tier with `make test-slow` (it installs "
                           "speculators)")
    x = exported["x"]
    torch.save({"aux": exported["aux"], "next_ids": torch.cat([x[:, 1:], x.new_zeros(1, 1)], 1), "steps": STEPS},
               tmp_path/"inputs.pt")
    t0 = time.perf_counter()
    r = subprocess.run([py, str(READER), str(exported["spec"]), str(tmp_path), str(THREADS), "sdpa"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads((tmp_path/"report.json").read_text())
    print(f"\nreal-shape speculators {exported['name']}: read in {rep['load_s']:.0f} s, whole reader "
          f"{time.perf_counter() - t0:.0f} s, its peak RSS {rep['peak_gib']:.1f} GiB")
    assert (rep["class"], rep["attn"], rep["dtype"]) == ("Eagle3DraftModel", "sdpa", "torch.float32"), rep
    assert rep["unexpected"] == [], rep                                          # every tensor we wrote has a home
    assert rep["missing"] == ["verifier_lm_head.weight", "verifier_norm.weight"], rep   # the verifier's, for training
    assert rep["not_equal"] == [], rep
    assert rep["aux_ids"] == exported["config"].aux_layers_hf and rep["norm_before_residual"] is False
    got = torch.load(tmp_path/"outputs.pt")["logits"]
    assert len(got) == STEPS
    for k, (a, b) in enumerate(zip(exported["ref"], got)):
        assert a.shape == b.shape == (1, T, N), (k, a.shape, b.shape)
        assert torch.equal(a, b), f"TTT step {k}: max |diff| {(a - b).abs().max().item():.3g}"

if __name__ == "__main__": sys.exit(pytest.main([__file__, "-s"]))
