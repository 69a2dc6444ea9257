"`[train] select = \"tuning\"` on a copy of the shared tiny run: the best checkpoint on the tuning prompts only."
import json
import torch
from conftest import BIN, copy_run, run


def test_select_tuning_keeps_the_best_checkpoint_scored_on_tuning_prompts_only(tiny_main_job, tmp_path, monkeypatch):
    "Train again with select = tuning: the kept step is the argmax, its weights are the drafter's, the report says it."
    import eagle3nb.checkpoints as ck
    from eagle3nb.drafter import load_drafter
    from eagle3nb.pipeline import run_default
    seen = {"greedy": [], "scored": []}   # every prompt the choice decoded or replayed
    greedy, measure = ck.greedy_runs, ck.measure_replay
    def greedy_spy(model, prompts, *a, **kw):
        seen["greedy"] += [tuple(p) for p in prompts]
        return greedy(model, prompts, *a, **kw)
    def measure_spy(model, drafter, prompts, *a, **kw):
        seen["scored"] += [i for i, _ in prompts]
        return measure(model, drafter, prompts, *a, **kw)
    monkeypatch.setattr(ck, "greedy_runs", greedy_spy)
    monkeypatch.setattr(ck, "measure_replay", measure_spy)
    d = copy_run(tiny_main_job, tmp_path/"run", drop=("train", "evaluate", "export"))
    led = run_default("tiny", run=str(d), stages=["train"],
                      train={"select": "tuning", "ckpt_every": 1, "keep_checkpoints": 0})
    m = json.loads((d/"train/manifest.json").read_text())
    sel = m["select"]
    steps, scores = [q["step"] for q in sel["points"]], [q["tokens_per_forward"] for q in sel["points"]]
    # every kept checkpoint scored, the last step among them, with what bench/trend.py draws
    assert steps == [s for s, _ in ck.kept_checkpoints(d)] and len(steps) >= 2 and steps[-1] == m["counts"]["steps"]
    for q in sel["points"]:
        assert {"train_tokens", "cpu_minutes", "heldout_loss", "ci95"} <= set(q) and q["train_loss"] is not None
        assert q["ci95"][0] <= q["tokens_per_forward"] <= q["ci95"][1]
    assert sel["points"][-1]["heldout_loss"] is not None                 # held out at the last step at least
    assert sel["kept_step"] == steps[scores.index(max(scores))]          # the argmax (the first of equals)
    kept = ck.checkpoint_drafter(d/"train/drafter", dict(ck.kept_checkpoints(d))[sel["kept_step"]]).state_dict()
    final = load_drafter(d/"train/drafter").state_dict()
    assert kept.keys() == final.keys() and all(torch.equal(kept[k], final[k]) for k in kept)
    assert f"kept step {sel['kept_step']} of {len(steps)} checkpoints" in led["train"]["summary"]
    assert f"kept step {sel['kept_step']}" in (d/"report.md").read_text()
    rd = lambda f: [json.loads(x) for x in open(d/f)]
    tune, held, sealed = rd("tuning_prompts.jsonl"), rd("evaluate_prompts.jsonl"), rd("sealed_prompts.jsonl")
    assert sel["prompt_ids"] == [p["id"] for p in tune]
    assert set(seen["scored"]) == {p["id"] for p in tune}                # replayed: the tuning prompts, no other
    assert set(seen["greedy"]) == {tuple(p["prompt_ids"]) for p in tune}   # decoded: the same
    other = held + sealed
    assert not set(seen["scored"]) & {p["id"] for p in other}
    assert not set(seen["greedy"]) & {tuple(p["prompt_ids"]) for p in other}
    # `eagle3nb train` on the run chooses as the main job's train stage does (its pipeline_config.json's settings)
    r = run([str(BIN/"eagle3nb"), "train", "--run", str(d), "--fresh"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    again = json.loads((d/"train/manifest.json").read_text())["select"]
    score = lambda s: [(q["step"], q["tokens_per_forward"], q["ci95"]) for q in s["points"]]
    assert score(again) == score(sel) and f"kept step {sel['kept_step']} of" in r.stdout
