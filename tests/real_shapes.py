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
