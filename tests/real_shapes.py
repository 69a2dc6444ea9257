"""The shipped configs' targets at their true shapes, as config.json dicts (no weights: nothing is downloaded).
Qwen3-8B as its Hugging Face config.json says; Kimi-K2.5 as its multimodal wrapper (`KimiK25ForConditionalGeneration`)
with a DeepSeek-V3-style `text_config`. Shared by the real-shape tests (`pytest -m real_shapes`)."""

QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
            "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960, "rope_theta": 1000000,
            "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu"}

KIMI_K25 = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
            "text_config": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
                            "hidden_size": 7168, "vocab_size": 163840, "num_hidden_layers": 61,
                            "num_attention_heads": 64, "num_key_value_heads": 64, "intermediate_size": 18432,
                            "moe_intermediate_size": 2048, "n_routed_experts": 384, "n_shared_experts": 1,
                            "num_experts_per_tok": 8, "first_k_dense_replace": 1, "q_lora_rank": 1536,
                            "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
                            "rope_theta": 50000.0, "rope_scaling": {"type": "yarn", "factor": 64.0,
                                                                    "original_max_position_embeddings": 4096,
                                                                    "beta_fast": 32.0, "beta_slow": 1.0,
                                                                    "mscale": 1.0, "mscale_all_dim": 1.0},
                            "max_position_embeddings": 262144, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
                            "bos_token_id": 163584, "eos_token_id": 163585, "hidden_act": "silu",
                            "dtype": "bfloat16"}}

# shipped config → its target's config.json (the configs name /models/... paths that do not exist here)
TARGETS = {"configs/qwen3-8b-sglang.toml": QWEN3_8B, "configs/kimi-k2.5-sglang.toml": KIMI_K25}

# the names each target's checkpoint gives the tensors a drafter reads (Kimi-K2.5: the multimodal wrapper's
# `language_model.` prefix around a DeepSeek-V3 causal LM, as its model.safetensors.index.json lists them)
NAMES = {"qwen3": {"embed": "model.embed_tokens.weight", "lm_head": "lm_head.weight", "norm": "model.norm.weight"},
         "kimi_k25": {"embed": "language_model.model.embed_tokens.weight", "lm_head": "language_model.lm_head.weight",
                      "norm": "language_model.model.norm.weight"}}


def _random_bf16(shape, seed):
    "A bf16 tensor of `shape`, N(0, 0.02), filled a block of rows at a time (never a float32 copy of it all)."
    import torch
    g, out = torch.Generator().manual_seed(seed), torch.empty(shape, dtype=torch.bfloat16)
    for a in range(0, shape[0], 8192):
        out[a:a + 8192] = torch.randn((min(8192, shape[0] - a), *shape[1:]), generator=g).mul_(0.02)
    return out


def write_target(d, config:dict):
    """A target model directory at `config`'s true shape: config.json and a sharded bf16 checkpoint holding only what
    a drafter reads (embedding, lm_head, final norm), one shard each, with `model.safetensors.index.json`."""
    import json, torch
    from pathlib import Path
    from safetensors.torch import save_file
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    (d/"config.json").write_text(json.dumps(config, indent=1))
    c = config.get("text_config", config)
    V, H = int(c["vocab_size"]), int(c["hidden_size"])
    names = NAMES[config["model_type"]]
    tensors = {"embed": (V, H), "lm_head": (V, H), "norm": (H,)}
    weight_map, total = {}, 0
    for k, (part, shape) in enumerate(tensors.items()):
        t = _random_bf16(shape, k) if part != "norm" else torch.ones(shape, dtype=torch.bfloat16)
        f = f"model-{k + 1:05d}-of-{len(tensors):05d}.safetensors"
        save_file({names[part]: t}, str(d/f), metadata={"format": "pt"})
        weight_map[names[part]], total = f, total + t.numel() * 2
        del t
    (d/"model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                              "weight_map": weight_map}, indent=1))
    return d


def write_capture(run, target, config:dict, n_records:int=6, length:int=128, seed:int=0,
                  aux_layers:list|None=None):
    """`run/capture` as `eagle3nb capture` writes it: `n_records` records of `length` tokens, random bf16 hidden states
    of the target's width (`aux_layers`, HF indices, default EAGLE-3's three; and the final state), random token ids,
    the second half of each record its answer. Returns the aux layers."""
    import torch
    from pathlib import Path
    from eagle3nb.capture import ShardWriter, default_aux_layers, shard_rows
    from eagle3nb.core import write_jsonl_atomic, write_manifest
    c = config.get("text_config", config)
    V, H, L = int(c["vocab_size"]), int(c["hidden_size"]), int(c["num_hidden_layers"])
    aux_layers, out = list(aux_layers or default_aux_layers(L)), Path(run)/"capture"
    g = torch.Generator().manual_seed(seed)
    w = ShardWriter(out/"shards", "r0", "bfloat16")
    for i in range(n_records):
        ids = torch.randint(0, V, (length,), generator=g).tolist()
        w.add(f"rec{i}", torch.randn(length, len(aux_layers) * H, generator=g), torch.randn(length, H, generator=g),
              ids, [0] * (length // 2) + [1] * (length - length // 2))
    w.flush()
    write_jsonl_atomic(out/"index.jsonl", shard_rows(out/"shards"))
    write_manifest(out, "capture", config={"target": str(target), "aux_layers_hf": aux_layers, "hidden_size": H,
                                           "num_layers": L, "dtype": "bfloat16"},
                   counts={"records": n_records, "captured": n_records, "tokens": n_records * length})
    return aux_layers


def rss_run(args, env=None) -> tuple:
    "Run a command; `(returncode, peak RSS in bytes, stderr tail)` (the peak from wait4's rusage of that child)."
    import os, subprocess
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, **(env or {})})
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, ru.ru_maxrss * 1024, err[-3000:]


def plan_output(config, *settings, extra=()) -> str:
    "What `eagle3nb run CONFIG --plan [extra] --set SETTINGS` prints (it must succeed)."
    import subprocess, sys
    from pathlib import Path
    r = subprocess.run([str(Path(sys.executable).parent/"eagle3nb"), "run", str(config), "--plan", *extra, "--set",
                        *settings], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def plan_need(out:str) -> float:
    "The bytes a plan's training line says a step needs on this machine (`this machine (cpu): needs X GiB`)."
    import re
    return float(re.search(r"this machine \(cpu\): needs ([\d.]+) GiB", out)[1]) * 2**30
