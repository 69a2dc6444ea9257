"The main job end to end at the tiny size: the CLI after kill -9 resumes, a plain script runs it, configs are checked."
import json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest
from conftest import BIN, ROOT, copy_run, pause_env, run, wait_paused

def _ledger(run_dir): 
    p = Path(run_dir)/"pipeline.json"
    try: return json.loads(p.read_text()) if p.exists() else {}
    except json.JSONDecodeError: return {}

@pytest.mark.slow
def test_main_job_killed_mid_training_resumes_and_reports(tiny_main_job, tmp_path):
    "The CLI route: the shared tiny run up to capture, `eagle3nb run` killed -9 in training, then run again."
    d = copy_run(tiny_main_job, tmp_path/"run", drop=("train", "evaluate", "export"))
    cmd = [str(BIN/"eagle3nb"), "run", "--size", "tiny", "--run", str(d)]
    env, marker = pause_env(tmp_path, "checkpoint", 1)  # it waits after training's first checkpoint
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    wait_paused(p, marker)
    os.killpg(p.pid, signal.SIGKILL)                    # killed in training: no report yet
    p.wait()
    early = {"prepare", "generate", "validate", "context", "capture"}
    assert not (d/"report.html").exists() and set(_ledger(d)) == early
    r = run(cmd)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for s in early: assert f"{s}: done earlier under the same settings — skipped" in r.stdout
    assert "train: " in r.stdout
    led = _ledger(d)
    assert list(led) == ["prepare", "generate", "validate", "context", "capture", "train", "evaluate", "export"]
    # every record accounted for, stage by stage
    m = json.loads((d/"prompts/manifest.json").read_text())["counts"]
    assert m["read"] == 300 and m["accepted"] + m["rejected"] == 300
    g = json.loads((d/"generate/manifest.json").read_text())["counts"]
    assert (g["items"], g["success"] + g["failed"] + g["skipped"], g["success"]) == (4, 4, 4)
    v = json.loads((d/"validate/manifest.json").read_text())["counts"]
    assert v["read"] == 4 and v["accepted"] + v["rejected"] == 4
    c = json.loads((d/"capture/manifest.json").read_text())["counts"]
    ctx = [json.loads(x) for x in (d/"capture_records.jsonl").read_text().splitlines()][v["accepted"]:]
    # the dataset's own replies after unused prompts: the loss mask on the reply only
    assert len(ctx) == 4 and all(r["id"].startswith("context-") and not any(r["loss_mask"][:r["n_prompt"]])
                                 and any(r["loss_mask"][r["n_prompt"]:]) for r in ctx)
    assert c["captured"] + c["quarantined"] + c["skipped"] == v["accepted"] + 4
    ctx_line = led["context"]["summary"]
    assert ctx_line.startswith("context: 4 records from") and "dataset's replies" in ctx_line
    t = json.loads((d/"train/manifest.json").read_text())
    assert t["counts"]["train_records"] + t["counts"]["heldout_records"] == c["captured"]
    # evaluated on conversations it never generated for nor captured as context (so never trained on)
    from eagle3nb.prompts import conversation_of
    rows = lambda f: [json.loads(x) for x in (d/f).read_text().splitlines()]
    held, gen = rows("evaluate_prompts.jsonl"), rows("generate_prompts.jsonl")
    by_id = {p["id"]: p for p in rows("prompts/prompts.jsonl")}
    trained = gen + [by_id[r["prompt_id"]] for r in ctx]
    assert held and len(gen) == 4 and not {conversation_of(p) for p in held} & {conversation_of(p) for p in trained}
    assert not {tuple(p["prompt_ids"]) for p in held} & {tuple(p["prompt_ids"]) for p in trained}
    rep = json.loads((d/"evaluate/report.json").read_text())
    assert {r["method"] for r in rep["rows"]} == {"eagle3", "ngram", "target"}
    # one report: markdown and a self-contained page, with the headline and the serving commands
    md, page = (d/"report.md").read_text(), (d/"report.html").read_text()
    assert "## Headline: the drafter beside n-gram on held-out prompts" in md and "**Verdict: " in md
    assert (d/"evaluate/per_prompt.jsonl").exists() and "power" in rep and "power" in rep["sealed"]
    from eagle3nb.power import headline_from_per_prompt   # every headline figure recomputed from the per-prompt file
    for which, p in (("heldout", rep["power"]), ("sealed", rep["sealed"]["power"])):
        h = headline_from_per_prompt(d/"evaluate/per_prompt.jsonl", which, ks=p["k"])
        assert h["tokens_per_forward"] == p["tokens_per_forward"] and h["n_prompts"] == p["n_prompts"]
    assert "tokens / target forward" in md
    assert "vllm serve" in md and "--speculative-algorithm EAGLE3" in md
    assert page.count("data:image/png;base64,") >= 3 and "src=\"plots/" not in page
    assert r.stdout.rstrip().splitlines()[-1].startswith("evaluate (1 held-out prompts")
    for fmt in ("speculators", "sglang"): assert (d/f"export/{fmt}/config.json").exists()
    # a third run does nothing again
    r = run(cmd)
    assert r.returncode == 0 and r.stdout.count("done earlier under the same settings") == 8

@pytest.mark.slow
def test_example_script_runs_the_pipeline(tmp_path):
    r = run([sys.executable, str(ROOT/"examples/pipeline.py"), str(tmp_path/"ex")], cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "eagle3  K=1  tokens per target forward" in r.stdout and "ngram   K=1" in r.stdout
    assert "best eagle3  K=" in r.stdout and "best ngram   K=" in r.stdout and "verdict: " in r.stdout
    led = json.loads((tmp_path/"ex/pipeline.json").read_text())
    assert led["capture"]["summary"].startswith("capture: skipped (train.source is online")
    assert json.loads((tmp_path/"ex/train/manifest.json").read_text())["config"]["source"] == "online"
    assert not (tmp_path/"ex/capture").exists()         # online: no hidden states stored
    assert (tmp_path/"ex/report.html").exists()

@pytest.mark.parametrize("name", ["qwen3-8b-sglang.toml", "kimi-k2.5-sglang.toml", "qwen3-8b-dflash.toml"])
def test_example_configs_read(name):
    from eagle3nb.settings import pipeline_config
    c = pipeline_config(ROOT/"configs"/name)
    assert c.generate.engine == "sglang" and c.generate.urls and c.train.ttt_steps == 7
    if "dflash" in name:            # its base's settings, its own DFlash ones (z-lab's drafter for Qwen3-8B)
        base = pipeline_config(ROOT/"configs/qwen3-8b-sglang.toml")
        assert (c.data, c.generate, c.train.lr, c.train.epochs) == (base.data, base.generate, base.train.lr,
                                                                     base.train.epochs)
        assert (c.train.drafter, c.train.block_size, c.train.dflash_layers, c.capture.aux_layers) == \
            ("dflash", 16, 5, [2, 10, 18, 26, 34]) and c.run != base.run

def test_bad_config_names_the_key_and_file(tmp_path):
    p = tmp_path/"bad.toml"
    p.write_text('target = "/m"\n[train]\nepoch = 2\n')
    r = run([str(BIN/"eagle3nb"), "run", str(p)])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{p} [train]: unknown key `epoch` — did you mean `epochs`?" in r.stderr
    p.write_text('[generate]\nengine = "sglang"\n')
    r = run([str(BIN/"eagle3nb"), "run", str(p)])
    assert r.returncode == 2 and "needs `urls`" in r.stderr
    r = run([str(BIN/"eagle3nb"), "run", "--set", "train.epochs=two"])
    assert r.returncode == 2 and "`epochs` = 'two' must be int" in r.stderr

def test_a_killed_parent_leaves_no_server(tmp_path):
    # the pipeline's `eagle3nb serve` child dies with it, even on kill -9 (nothing left holding the model in memory)
    code = ("from eagle3nb.serve import start_server_process; p, url = start_server_process('tiny-llama');"
            "print('pid', p.pid, flush=True); import time; time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(next(line for line in parent.stdout if line.startswith("pid ")).split()[1])
    os.kill(child, 0)                                    # the server is up
    parent.kill()
    parent.wait()
    t0 = time.time()
    while time.time() - t0 < 30:
        try: os.kill(child, 0)
        except ProcessLookupError: break
        if Path(f"/proc/{child}/stat").read_text().split()[2] == "Z": break   # exited, not yet reaped
        time.sleep(0.2)
    else: raise AssertionError(f"eagle3nb serve (pid {child}) outlived its killed parent")

def test_numbers_cannot_flatter_stale_stages_moved_windows_or_shared_conversations(tiny_main_job, tmp_path, capsys):
    "The ledger's four-step reproduction, the held-out window, the sampling lock and the guard, on one tiny run."
    from eagle3nb.core import InputError
    from eagle3nb.pipeline import STAGES, run_default
    d = str(copy_run(tiny_main_job, tmp_path/"run"))
    led = run_default("tiny", run=d)
    assert all(led[s] == v for s, v in _ledger(tiny_main_job).items())   # a copied run is done: nothing ran again
    capture_before = json.loads((tmp_path/"run/capture/manifest.json").read_text())["counts"]
    # 1. more held-out prompts: only evaluation (and export) run again; the training data does not move
    held1 = [json.loads(x)["id"] for x in (tmp_path/"run/evaluate_prompts.jsonl").read_text().splitlines()]
    led2 = run_default("tiny", run=d, evaluate={"n_prompts": 3})
    assert [s for s in led2 if led2[s] != led[s]] == ["evaluate", "export"]
    held2 = [json.loads(x)["id"] for x in (tmp_path/"run/evaluate_prompts.jsonl").read_text().splitlines()]
    assert len(held2) == 3 and held2[:len(held1)] == held1
    # 2. a changed capture setting and a --stages run after it: refused, naming the stale stage, nothing run
    with pytest.raises(InputError, match="--stages train,evaluate,export: context, capture must run first"):
        run_default("tiny", run=d, context={"n_prompts": 2}, stages=["train", "evaluate", "export"])
    assert _ledger(d)["train"] == led2["train"]
    # 3. the run recaptures and retrains (never "done earlier" on the old capture); evaluation and export after it
    # are what step 1 reran, so the run stops at training here
    capsys.readouterr()
    led3 = run_default("tiny", run=d, context={"n_prompts": 2}, stages=list(STAGES[:STAGES.index("train") + 1]))
    out = capsys.readouterr().out
    assert "capture: its settings, or the data of a stage before it, changed" in out
    assert "train: its settings, or the data of a stage before it, changed" in out
    c3 = json.loads((tmp_path/"run/capture/manifest.json").read_text())["counts"]
    assert c3["records"] == capture_before["records"] - 2
    t3 = json.loads((tmp_path/"run/train/manifest.json").read_text())["counts"]
    assert t3["train_records"] + t3["heldout_records"] == c3["captured"]
    # 4. a stage rerun under the same settings makes what follows stale: --stages after it refuses
    run_default("tiny", run=d, context={"n_prompts": 2}, stages=["capture"], fresh=True)
    with pytest.raises(InputError, match="--stages evaluate: train must run first"):
        run_default("tiny", run=d, context={"n_prompts": 2}, stages=["evaluate"])
    assert _ledger(d)["evaluate"] == led3["evaluate"]
    # other sampling never passes the old samples on: refused, with the way out
    with pytest.raises(InputError, match="holds samples made with .*temperature.*: rerun with --fresh"):
        run_default("tiny", run=d, generate={"temperature": 0.7}, stages=["generate"])
    # the guard: a prompt the drafter was trained on is refused before any forward, named
    gen = [json.loads(x) for x in (tmp_path/"run/generate_prompts.jsonl").read_text().splitlines()]
    (tmp_path/"leak.jsonl").write_text(json.dumps({"id": "leak-t0", "prompt_ids": gen[0]["prompt_ids"]}) + "\n")
    r = run([str(BIN/"eagle3nb"), "evaluate", "--run", d, "--prompts_file", str(tmp_path/"leak.jsonl"), "--ks", "1"])
    assert r.returncode == 2 and "leak-t0 (the same prompt ids)" in r.stderr, r.stderr[-2000:]
    src = gen[0]["source"]["row"]
    sibling = {"id": src["id"].rsplit("_", 1)[0] + "_999",          # another row of a trained-on conversation
               "conversations": [{"from": "human", "value": "And what happened next?"}]}
    (tmp_path/"conv.jsonl").write_text(json.dumps(sibling) + "\n")
    r = run([str(BIN/"eagle3nb"), "evaluate", "--run", d, "--prompts_file", str(tmp_path/"conv.jsonl"), "--ks", "1"])
    assert r.returncode == 2 and f"(conversation {gen[0]['conversation']!r})" in r.stderr, r.stderr[-2000:]

def test_the_tiny_main_job_runs_every_stage_and_a_rerun_plans_to_skip_them(tiny_main_job):
    ("`eagle3nb run --size tiny` end to end (what nbs/12b_pipeline's slow cells check on a run of their own): every "
     "stage, tiny's context records, the sealed set and the vocab sweep; run again, the plan skips every stage, and a "
     "training change reruns training and after.")
    from eagle3nb.core import STAGES, JsonlReader, read_json
    from eagle3nb.pipeline import plan, pipeline_config, stage_keys
    d = Path(tiny_main_job)
    led = _ledger(d)
    assert list(led) == STAGES
    assert read_json(d/"generate"/"manifest.json")["counts"]["success"] == 4
    assert (d/"report.html").exists() and (d/"export"/"speculators"/"config.json").exists()
    # tiny's 4 context records: prompts with the dataset's replies, none of them generated for or held out
    ctx = [o for _, o in JsonlReader(d/"capture_records.jsonl") if o["id"].startswith("context-")]
    held = {tuple(o["prompt_ids"]) for _, o in JsonlReader(d/"evaluate_prompts.jsonl")}
    assert len(ctx) == 4
    rep = read_json(d/"evaluate"/"report.json")
    sealed = rep["sealed"]                                # measured last, from the far end of ShareGPT
    assert (sealed["n_prompts"], sorted(sealed["best"])) == (1, ["eagle3", "ngram"])
    assert [s["draft_vocab_size"] for s in rep["vocab_sweep"]] == [512, 1024]   # tiny's N=512 beside the main N=1024
    for r in ctx:   # the loss mask covers the reply (at most [generate] max_new_tokens of it) and nothing before it
        n = r["n_prompt"]
        assert r["loss_mask"][:n] == [0] * n
        assert 0 < sum(r["loss_mask"]) <= 24 and tuple(r["input_ids"][:n]) not in held
    def state(c):   # each stage's [runs] or [skipped (done)] from the plan's lines
        return {ln.split()[0]: ln.split("[")[1].split("]")[0] for ln in plan(c)[1:] if ln[2] != " " and "[" in ln}
    assert set(state(pipeline_config(size="tiny", run=str(d))).values()) == {"skipped (done)"}
    again = state(pipeline_config(size="tiny", run=str(d), train={"lr": 3e-3}))
    assert [s for s, v in again.items() if v == "runs"] == ["train", "evaluate", "export"]
    assert stage_keys(pipeline_config(size="tiny", train={"lr": 3e-3}))["train"] != led["train"]["key"]

def test_tuning_prompts_share_no_conversation_with_what_is_measured_or_trained_on(tiny_main_job):
    "The main job's tuning set (for bench/recipes.py): its own conversations, apart from held-out, sealed and training."
    from eagle3nb.heldout import check_heldout, trained_on
    from eagle3nb.prompts import conversation_of
    d = Path(tiny_main_job)
    rd = lambda f: [json.loads(x) for x in (d/f).read_text().splitlines()]
    tune, held, sealed = rd("tuning_prompts.jsonl"), rd("evaluate_prompts.jsonl"), rd("sealed_prompts.jsonl")
    assert len(tune) == 2 and held and sealed                         # tiny's [evaluate] tuning_n_prompts
    convs = lambda ps: {conversation_of(p) for p in ps}
    t = trained_on(d/"train")
    assert t.conversations and t.records
    assert not convs(tune) & (convs(held) | convs(sealed) | t.conversations)
    check_heldout(tune, t, "tuning prompts")                          # the guard's own check: no raise
    ids = {tuple(p["prompt_ids"]) for p in tune}
    assert not ids & {tuple(p["prompt_ids"]) for p in held + sealed} and not ids & t.prompts
    screen = json.loads((d/"prompt_screen.json").read_text())
    assert screen["tuning"]["kept"] == 2                              # drawn under the same screen, recorded

def test_train_command_trains_as_the_main_job(tiny_main_job, tmp_path):
    "One set of defaults: `eagle3nb train --run R` on a main-job run trains exactly as `eagle3nb run --stages train`."
    import torch
    from safetensors.torch import load_file
    a = tiny_main_job                                   # trained by the pipeline's train stage
    b = copy_run(a, tmp_path/"b", drop=("train", "evaluate", "export"))
    r = run([str(BIN/"eagle3nb"), "train", "--run", str(b)])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"settings: [train] of {b/'pipeline_config.json'}" in r.stdout
    ma, mb = (json.loads((d/"train/manifest.json").read_text()) for d in (a, b))
    drop = lambda c: {k: v for k, v in c.items() if k != "source_dir"}
    assert drop(ma["config"]) == drop(mb["config"])
    assert ma["config"]["lr"] == 2e-3                  # the main job's recipe, not a second set of defaults
    clock = lambda f: {s: {k: v for k, v in r.items() if k not in ("tokens_per_s", "seconds")} for s, r in f.items()}
    assert ma["counts"] == mb["counts"] and clock(ma["final"]) == clock(mb["final"])   # all but the wall clock
    wa, wb = (load_file(d/"train/drafter/model.safetensors") for d in (a, b))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    # a flag changes one setting, not the recipe; a renamed flag is refused with the new name
    r = run([str(BIN/"eagle3nb"), "train", "--run", str(b), "--layers", "2,15,27"])
    assert r.returncode == 2 and "--layers was renamed: use --aux_layers" in r.stderr
