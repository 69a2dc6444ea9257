"""Exports against their readers' expectations, offline.

SGLang skips tensor names it does not know, silently, so a wrong prefix serves a random drafter. Below is what
`LlamaForCausalLMEagle3` (sgl-project/sglang, python/sglang/srt/models/llama_eagle3.py) builds and how its
`load_weights` maps checkpoint names, written down from its source:
- parameters: `model.embed_tokens.weight` [V, H] (shared from the target when absent), `model.fc.weight`
  [H, 3·target_hidden_size] (bias only with config.bias), `model.midlayer.input_layernorm.weight`,
  `model.midlayer.hidden_norm.weight`, `model.midlayer.post_attention_layernorm.weight` [H],
  `model.midlayer.self_attn.qkv_proj.weight` [(heads + 2·kv_heads)·head_dim, 2H] (input 2H: cat(embed, hidden)),
  `model.midlayer.self_attn.o_proj.weight` [H, heads·head_dim], `model.midlayer.mlp.gate_up_proj.weight` [2I, H],
  `model.midlayer.mlp.down_proj.weight` [H, I], `model.norm.weight` [H], and `lm_head.weight` [draft_vocab_size, H]
  — only when `tie_word_embeddings` is false (else lm_head *is* embed_tokens);
- `load_weights`: a name containing `d2t` becomes the hot-token map (`d2t + arange`), `t2d` is skipped;
  `.q_proj/.k_proj/.v_proj` → `.qkv_proj` shards q/k/v, `.gate_proj/.up_proj` → `.gate_up_proj` shards 0/1;
  a name not in the parameters is tried with a `model.` prefix; anything still unknown is dropped silently.
- EAGLE-3.1's norms, as released 0.5.23 builds them (`LlamaModel.__init__`, llama_eagle3.py:169-207; 0.5.12 for
  `fc_norm`, 0.5.17 for `norm_before_fc`): `model.input_norm.weight` [3·target_hidden_size] when
  `eagle_config.norm_before_fc` (else the top-level key) is true, `model.fc_norm.{0,1,2}.weight` [target_hidden_size]
  when `fc_norm` (or the old `use_aux_norm`) is; `norm_output` adds no tensor (the normed state is fed back).
"""
import json
import torch
import pytest
from safetensors.torch import load_file
from eagle3nb.capture import default_aux_layers
from eagle3nb.drafter import new_drafter
from eagle3nb.export import export_sglang, export_speculators, load_export
from eagle3nb.models import load_target

STACKED = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"),
           (".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1)]

def sglang_params(cfg:dict) -> dict:
    "Parameter name -> shape of SGLang's LlamaForCausalLMEagle3 built from `cfg` (as its __init__ does)."
    H, I, d = (cfg["hidden_size"], cfg["intermediate_size"],
               cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    nh, nkv, Ht = (cfg["num_attention_heads"], cfg["num_key_value_heads"],
                   cfg.get("target_hidden_size", cfg["hidden_size"]))
    p = {"model.embed_tokens.weight": (cfg["vocab_size"], H), "model.fc.weight": (H, 3 * Ht),
         "model.midlayer.input_layernorm.weight": (H,), "model.midlayer.hidden_norm.weight": (H,),
         "model.midlayer.post_attention_layernorm.weight": (H,),
         "model.midlayer.self_attn.qkv_proj.weight": ((nh + 2 * nkv) * d, 2 * H),
         "model.midlayer.self_attn.o_proj.weight": (H, nh * d),
         "model.midlayer.mlp.gate_up_proj.weight": (2 * I, H), "model.midlayer.mlp.down_proj.weight": (H, I),
         "model.norm.weight": (H,)}
    if not cfg.get("tie_word_embeddings", False):
        p["lm_head.weight"] = (cfg["draft_vocab_size"] or cfg["vocab_size"], H)
    if (cfg.get("eagle_config") or {}).get("norm_before_fc", cfg.get("norm_before_fc")):
        p["model.input_norm.weight"] = (3 * Ht,)
    if cfg.get("fc_norm") or cfg.get("use_aux_norm"): p.update({f"model.fc_norm.{i}.weight": (Ht,) for i in range(3)})
    return p

def sglang_load(cfg:dict, tensors:dict) -> tuple:
    "Replay SGLang's load_weights: return `(filled {param: [(shard, shape)]}, hot_token_id, dropped names)`."
    params, filled, hot, dropped = sglang_params(cfg), {}, None, []
    for name, w in tensors.items():
        if "d2t" in name:
            hot = w + torch.arange(w.shape[0])
            continue
        if "t2d" in name: continue
        for param_name, weight_name, shard in STACKED:
            if weight_name not in name: continue
            n = name.replace(weight_name, param_name)
            n = f"model.{n}" if n not in params else n
            if n in params: filled.setdefault(n, []).append((shard, tuple(w.shape)))
            else: dropped.append(name)
            break
        else:
            n = name if name in params else f"model.{name}"
            if n in params: filled.setdefault(n, []).append((None, tuple(w.shape)))
            else: dropped.append(name)
    return params, filled, hot, dropped

@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen3"])
def drafter(request):
    tgt = load_target(request.param)
    d = new_drafter(tgt, list(range(0, 6000, 3)), default_aux_layers(tgt.config()["num_hidden_layers"])).eval()
    for p in d.parameters():
        if p.requires_grad: torch.nn.init.normal_(p, std=0.2)
    return d

def test_sglang_names_and_shapes(drafter, tmp_path):
    out = export_sglang(drafter, tmp_path)
    cfg, t = json.loads((out/"config.json").read_text()), load_file(str(out/"model.safetensors"))
    c = drafter.config
    assert (cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["model_type"] == "llama"
            and cfg["num_hidden_layers"] == 1)
    assert cfg["tie_word_embeddings"] is False   # else SGLang makes lm_head the embeddings and ignores ours
    assert (cfg["vocab_size"], cfg["draft_vocab_size"],
            cfg["target_hidden_size"]) == (c.vocab_size, c.draft_vocab_size, c.target_hidden_size)
    assert cfg["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in c.aux_layers_hf],
                                   "use_aux_hidden_state": True}
    assert ({k: cfg[k] for k in ("norm_before_residual", "norm_output", "fc_norm")}
            == dict(norm_before_residual=False, norm_output=False, fc_norm=False))
    assert "embed_tokens.weight" not in t
    params, filled, hot, dropped = sglang_load(cfg, t)
    assert dropped == [], f"SGLang would silently drop {dropped}"
    assert set(params) - set(filled) == {"model.embed_tokens.weight"}   # every other parameter comes from our file
    H, d, nh, nkv = c.hidden_size, c.head_dim, c.num_attention_heads, c.num_key_value_heads
    assert (sorted(filled["model.midlayer.self_attn.qkv_proj.weight"], key=str)
            == [("k", (nkv * d, 2 * H)), ("q", (nh * d, 2 * H)), ("v", (nkv * d, 2 * H))])
    assert (sum(s[0] for _, s in filled["model.midlayer.self_attn.qkv_proj.weight"])
            == params["model.midlayer.self_attn.qkv_proj.weight"][0])
    assert (sum(s[0] for _, s in filled["model.midlayer.mlp.gate_up_proj.weight"])
            == params["model.midlayer.mlp.gate_up_proj.weight"][0])
    for n, shards in filled.items():
        if shards[0][0] is None: assert shards == [(None, params[n])], n
    assert torch.equal(hot, drafter.to_target_ids(torch.arange(c.draft_vocab_size)))   # d2t read as SGLang reads it

def test_sglang_replay_catches_a_wrong_prefix(drafter, tmp_path):
    "The replay is able to fail: a `model.layers.0.` prefix (a common mistake) is dropped, not loaded."
    out = export_sglang(drafter, tmp_path)
    cfg, t = json.loads((out/"config.json").read_text()), load_file(str(out/"model.safetensors"))
    bad = {k.replace("midlayer.", "layers.0."): v for k, v in t.items()}
    _, filled, _, dropped = sglang_load(cfg, bad)
    assert "model.midlayer.self_attn.qkv_proj.weight" not in filled and len(dropped) == 10

def test_round_trip_identical_logits(drafter, tmp_path):
    c = drafter.config
    x, aux = torch.randint(0, 6000, (2, 10)), torch.randn(2, 10, 3 * c.target_hidden_size)
    with torch.no_grad():
        ref = [drafter.logits(s) for s in drafter.ttt_forward(x, aux, [10, 7], 3)]
        for fmt, f in (("sglang", export_sglang), ("speculators", export_speculators)):
            d2 = load_export(f(drafter, tmp_path/fmt))
            assert d2.config == c, fmt
            got = [d2.logits(s) for s in d2.ttt_forward(x, aux, [10, 7], 3)]
            assert all(torch.equal(a, b) for a, b in zip(ref, got)), fmt

@pytest.mark.parametrize("norms", [{"fc_norm": True, "norm_output": True}, {"norm_before_fc": True}])
def test_eagle31_norms_round_trip_in_both_layouts(tmp_path, norms):
    ("EAGLE-3.1's norms travel in both exports (tensors and flags): read back exactly, and SGLang's loader (0.5.12 "
     "and up) places every norm tensor; the SGLang export names the release it needs.")
    tgt = load_target("tiny-llama")
    d = new_drafter(tgt, list(range(0, 6000, 3)), [2, 4, 5], **norms).eval()
    torch.manual_seed(2)
    for p in d.parameters():
        if p.requires_grad: torch.nn.init.normal_(p, 1.0 if p.dim() == 1 else 0.0, 0.2)   # norms not all ones
    x, aux = torch.randint(0, 6000, (1, 9)), torch.randn(1, 9, 3 * d.config.target_hidden_size)
    with torch.no_grad():
        ref = [d.logits(s) for s in d.ttt_forward(x, aux, [9], 3)]
        d2 = load_export(export_speculators(d, tmp_path/"spec"))
        assert d2.config == d.config and ("input_norm.weight" in d2.state_dict()) == bool(norms.get("norm_before_fc"))
        assert all(torch.equal(a, b) for a, b in zip(ref, [d2.logits(s) for s in d2.ttt_forward(x, aux, [9], 3)]))
        out = export_sglang(d, tmp_path/"sglang")
        d3 = load_export(out)
        assert d3.config == d.config
        assert all(torch.equal(a, b) for a, b in zip(ref, [d3.logits(s) for s in d3.ttt_forward(x, aux, [9], 3)]))
    cfg, t = json.loads((out/"config.json").read_text()), load_file(str(out/"model.safetensors"))
    params, filled, _, dropped = sglang_load(cfg, t)
    assert dropped == [], f"SGLang would silently drop {dropped}"
    assert set(params) - set(filled) == {"model.embed_tokens.weight"}, set(params) - set(filled)
    assert ("model.input_norm.weight" in filled) == bool(norms.get("norm_before_fc"))
    assert cfg["eagle3nb"]["sglang_min"] == ("0.5.17" if norms.get("norm_before_fc") else "0.5.12")
