"""The shipped configs (`configs/*.toml`) end to end at tiny scale, every key, stage and plan line on CPU (slow tier; a
file of its own, so that `make test-slow`'s two workers share the slow main jobs: `--dist loadfile`)."""
import json
import pytest
from conftest import ROOT

def _kimi_stand_in(d, kimi_dir):
    "A tiny random-weight model under Kimi K2.5's real tokenizer (163,840 ids; Kimi's eos `<|im_end|>`)."
    import shutil, torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM
    from eagle3nb.models import TINY
    cfg = Qwen3Config(vocab_size=163840, **TINY, bos_token_id=163584, eos_token_id=163586, pad_token_id=163585)
    torch.manual_seed(0)
    m = Qwen3ForCausalLM(cfg).float()
    m.generation_config = GenerationConfig(bos_token_id=163584, eos_token_id=163586, pad_token_id=163585)
    m.save_pretrained(d, safe_serialization=True)
    for f in kimi_dir.iterdir(): shutil.copy(f, d/f.name)
    return d

@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen3-8b-sglang.toml", "kimi-k2.5-sglang.toml"])
def test_shipped_configs_run_end_to_end_at_tiny_scale(name, tmp_path, kimi_dir):
    "Every key, stage and plan line of a shipped config runs on CPU: a tiny stand-in target, the local engine."
    from eagle3nb.pipeline import run_pipeline
    from eagle3nb.settings import pipeline_config
    target = "tiny-qwen3" if name.startswith("qwen3") else str(_kimi_stand_in(tmp_path/"kimi-tiny", kimi_dir))
    # Kimi's training streams from vLLM servers (the vLLM tier tests that: test_vllm_stream.py); here it trains on
    # what the local capture stored, with every other key of the file
    assert pipeline_config(ROOT/"configs"/name).train.source == ("offline" if name.startswith("qwen3") else "stream")
    c = pipeline_config(ROOT/"configs"/name, run=str(tmp_path/"run"), target=target,
                        data={"inputs": ["sharegpt"], "limit": 300},          # the config's /data files are not here
                        generate={"engine": "local", "urls": [], "n_prompts": 3, "max_new_tokens": 16},
                        capture={"engine": "local", "urls": []},              # the servers stand in for nothing here
                        train={"max_steps": 2, "heldout": 0.3, "source": "offline"},
                        evaluate={"n_prompts": 1, "max_new_tokens": 6})
    led = run_pipeline(c)
    assert list(led) == ["prepare", "generate", "validate", "context", "capture", "train", "evaluate", "export"]
    m = json.loads((tmp_path/"run/train/manifest.json").read_text())
    assert m["config"]["ttt_steps"] == 7 and m["config"]["lr"] == 3e-4        # the config's own training keys
    g = json.loads((tmp_path/"run/generate/config.json").read_text())["sampling"]
    assert (g["temperature"], g["top_p"], g["seed"]) == ((0.6, 0.95, 0) if name.startswith("qwen3") else (1.0, 0.95, 0))
    rep = json.loads((tmp_path/"run/evaluate/report.json").read_text())
    assert rep["config"]["ks"] == [1, 2, 3, 4, 5, 6, 7]
    for fmt in c.export.formats: assert (tmp_path/f"run/export/{fmt}/config.json").exists()
