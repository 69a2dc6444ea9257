"Statistics of `bench/seeds.py` on synthetic per-prompt records: seeds × conversations, Holm, the regenerated base."
import json, sys
import numpy as np
import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT/"bench"))
import seeds as S  # noqa: E402
from eagle3nb.power import paired_bootstrap  # noqa: E402


def records(tpf_by_k:dict, n_conv:int=30, per_conv:int=2, noise:float=0.15, rng_seed:int=0) -> list:
    "Per-prompt records: prompt i of conversation c, 100 output tokens, forwards giving about `tpf_by_k[k]`."
    rng, out = np.random.default_rng(rng_seed), []
    for c in range(n_conv):
        for j in range(per_conv):
            wobble = 1 + noise * rng.standard_normal()
            out.append({"id": f"c{c}-{j}", "conversation": f"c{c}", "output_tokens": 100,
                        "by_k": {"eagle3": {str(k): {"target_forwards": max(1, round(100 / (t * wobble)))}
                                            for k, t in tpf_by_k.items()},
                                 "ngram": {"1": {"target_forwards": 60}}}})
    return out


def arm(levels:list, rng_seed:int=0) -> list:
    "One arm: per seed, records at level `x` (K=2 best) on the same prompts with the same prompt-level noise."
    return [records({1: x * 0.8, 2: x, 3: x * 0.9}, rng_seed=rng_seed) for x in levels]


def width(ci): return ci[1] - ci[0]


def test_seeds_that_agree_give_the_conversation_only_interval():
    a, b = arm([2.0] * 3), arm([1.8] * 3, rng_seed=1)
    r = S.compare_arms(a, b, [0, 1, 2], [0, 1, 2], resamples=2000)
    one = paired_bootstrap([x["conversation"] for x in a[0]],
                           {"a": [list(v[0]) for v in S.arm_counts(a[:1], 2)[1:]],
                            "b": [list(v[0]) for v in S.arm_counts(b[:1], 2)[1:]]}, 2000, 0)
    assert r["ci95"] == pytest.approx(one["ratio"], abs=2e-4)
    assert r["k"] == {"a": 2, "b": 2}


def test_interval_widens_when_seeds_disagree_and_not_as_one_run():
    agree, disagree, b = arm([2.0, 2.0, 2.0]), arm([1.7, 2.0, 2.3]), arm([1.8] * 3, rng_seed=1)
    ra = S.compare_arms(agree, b, [0, 1, 2], [0, 1, 2], resamples=2000)
    rd = S.compare_arms(disagree, b, [0, 1, 2], [0, 1, 2], resamples=2000)
    assert width(rd["ci95"]) > 2 * width(ra["ci95"])
    # the seeds pooled as if they were one run (three times the prompts, resampled by conversation only)
    flat = [dict(r, id=f"{s}-{r['id']}") for s, recs in enumerate(disagree) for r in recs]
    flat_b = [dict(r, id=f"{s}-{r['id']}") for s, recs in enumerate(b) for r in recs]
    as_one = S.compare_arms([flat], [flat_b], [0], [0], resamples=2000)
    assert width(rd["ci95"]) > 2 * width(as_one["ci95"])
    sp = rd["spread"]["a"]
    assert sp["min"] < 1.8 < 2.2 < sp["max"] and set(sp["per_seed"]) == {"0", "1", "2"}


def test_k_is_chosen_per_arm_over_its_seeds_pooled():
    # seed 0 peaks at K=1, seeds 1 and 2 at K=3: pooled, K=3 wins; every seed is read at that K
    recs = [records({1: 2.2, 2: 2.0, 3: 1.5}), records({1: 1.5, 2: 1.6, 3: 2.4}), records({1: 1.5, 2: 1.6, 3: 2.4})]
    assert S.arm_k(recs) == 3
    assert S.spread(recs, 3, [0, 1, 2])["per_seed"]["0"] == pytest.approx(1.5, rel=0.05)


def test_holm_is_monotone_and_steps_down():
    ps = [0.03, 0.001, 0.2, 0.012]
    h = S.holm(ps)
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    adj = [h[i]["p_adjusted"] for i in order]
    assert adj == sorted(adj) and all(h[i]["p_adjusted"] >= ps[i] for i in range(len(ps)))
    assert [h[i]["level"] for i in order] == pytest.approx([1 - 0.05 / 4, 1 - 0.05 / 3, 1 - 0.05 / 2, 0.95])
    assert [h[i]["reached"] for i in order] == [True, True, True, False]   # 0.03 > 0.05/2: the step-down stops
    # more comparisons never make a test easier
    assert all(a["p_adjusted"] >= b["p_adjusted"] for a, b in zip(S.holm(ps + [0.5, 0.6]), h))
    assert [x["reached"] for x in S.holm([0.04, 0.04])] == [True, False]   # the first tested is always reached


def test_corrected_round_widens_intervals_and_decides():
    b = arm([1.8] * 3, rng_seed=1)
    rows = [S.compare_arms(arm(x), b, [0, 1, 2], [0, 1, 2], resamples=2000)
            for x in ([2.3, 2.3, 2.3], [1.8, 1.8, 1.8], [1.3, 1.3, 1.3], [1.9, 2.3, 1.6])]
    out = S.correct_round(rows)
    for r, o in zip(rows, out):
        assert o["ci_corrected"][0] <= r["ci95"][0] and o["ci_corrected"][1] >= r["ci95"][1]
        assert o["holm"]["m"] == 4 and "_draws" not in o
    assert [o["decision"] for o in out[:3]] == ["adopt", "keep default", "worse"]
    one = S.correct_round(rows[:1])[0]
    assert width(one["ci_corrected"]) < width(out[0]["ci_corrected"])   # one comparison: the plain 95 % interval
    assert one["ci_corrected"] == one["ci95"]


def test_decide_needs_the_step_down():
    assert S.decide([1.01, 1.2], True) == "adopt" and S.decide([1.01, 1.2], False) == "keep default"
    assert S.decide([0.8, 0.99], True) == "worse" and S.decide([0.9, 1.1], True) == "keep default"


def test_run_names_follow_recipes_set_seed():
    assert [S.seed_run_name("baseline", s) for s in (0, 1, 2)] == ["baseline", "baseline-seed1", "baseline-seed2"]
    assert "norms-off" in S.VARIANTS and S.VARIANTS["norms-off"] == {"norm_before_fc": False, "norm_output": False}


def test_arms_on_other_answers_are_refused():
    a, b = arm([2.0]), arm([2.0])
    b[0][0]["output_tokens"] = 99
    with pytest.raises(ValueError, match="same prompts and answers"): S.compare_arms(a, b, [0], [0])


def _fake_run(d, temperature:float, outputs:list):
    (d/"prompts").mkdir(parents=True)
    (d/"context").mkdir()
    (d/"generate").mkdir()
    cfg = {"run": str(d), "data": {"limit": 10}, "generate": {"temperature": temperature, "top_p": 1.0, "top_k": -1,
                                                             "seed": None, "max_new_tokens": 8}}
    (d/"pipeline_config.json").write_text(json.dumps(cfg))
    (d/"prompts"/"prompts.jsonl").write_text('{"id": "p0"}\n')
    (d/"generate_prompts.jsonl").write_text('{"id": "p0"}\n')
    (d/"context"/"records.jsonl").write_text('{"id": "context-p0"}\n')
    gens = [{"id": f"p{i}", "prompt_ids": [1, i], "output_ids": o,
             "sampling": {"temperature": temperature, "top_p": 1.0, "top_k": -1, "seed": None}}
            for i, o in enumerate(outputs)]
    (d/"generate"/"generations.jsonl").write_text("".join(json.dumps(g) + "\n" for g in gens))


def test_check_regen_accepts_only_other_answers(tmp_path):
    from eagle3nb.core import InputError
    base, run2 = tmp_path/"base", tmp_path/"regen"
    _fake_run(base, 0.0, [[5, 6], [7]])
    _fake_run(run2, 0.2, [[5, 9], [7]])
    info = S.check_regen(base, run2)
    assert info["answers_identical_to_base"] == 1 and info["sampling"][0]["temperature"] == 0.2
    cfg = json.loads((run2/"pipeline_config.json").read_text())
    cfg["data"]["limit"] = 11
    (run2/"pipeline_config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="data"): S.check_regen(base, run2)
    cfg["data"]["limit"] = 10
    (run2/"pipeline_config.json").write_text(json.dumps(cfg))
    (run2/"context"/"records.jsonl").write_text('{"id": "context-p1"}\n')
    with pytest.raises(InputError, match="records.jsonl"): S.check_regen(base, run2)


def test_regen_config_changes_only_the_sampling(tmp_path):
    _fake_run(tmp_path/"base", 0.0, [[1]])
    c = S.regen_config(tmp_path/"base", tmp_path/"r2", {"temperature": 0.2, "top_p": 0.9, "top_k": -1}, 0)
    assert c["generate"] == {"temperature": 0.2, "top_p": 0.9, "top_k": -1, "seed": 0, "max_new_tokens": 8}
    assert c["data"] == {"limit": 10} and c["run"] == str(tmp_path/"r2")


@pytest.mark.slow   # about 40 s of CPU beside the shared tiny run; 90 s wall on two loaded cores
def test_seeds_end_to_end_on_the_tiny_main_job(tiny_main_job, tmp_path):
    "Two seeds × (default, epochs1) on the tiny run's tuning prompts at T=0 and at the served sampling, then reused."
    from conftest import run
    from eagle3nb.evaluate import prompt_seed
    base, out = tmp_path/"base", tmp_path/"seeds"
    py, flags = sys.executable, ["--base", str(base), "--out", str(out), "--size", "tiny", "--max_new_tokens", "8"]
    r = run([py, str(ROOT/"bench"/"recipes.py"), "--from_run", str(tiny_main_job), "--base", str(base),
             "--size", "tiny"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    r = run([py, str(ROOT/"bench"/"seeds.py"), *flags, "--seeds", "0,1", "--arms", "epochs1", "--resamples", "200"],
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out/"seeds_results.json").read_text())
    assert res["m"] == 2 and [(x["arm"], x["column"]) for x in res["rows"]] == [("epochs1", "greedy"),
                                                                                ("epochs1", "served")]
    assert all(x["holm"]["m"] == 2 and x["decision"] in ("adopt", "worse", "keep default") for x in res["rows"])
    assert res["sampling"]["temperature"] == 0.2 and set(res["default"]["served"]["spread"]["per_seed"]) == {"0", "1"}
    for d in ("baseline", "baseline-seed1", "epochs1", "epochs1-seed1"):
        assert (out/d/"train"/"drafter").is_dir() and (out/d/"records"/"served-8.json").exists()
    weights = lambda d: S.digest([S.file_digest(f) for f in sorted((out/d/"train"/"drafter").iterdir())])
    assert weights("baseline") != weights("baseline-seed1")   # the seed changes the drafter
    tune = [json.loads(x) for x in open(base/"tuning_prompts.jsonl")]
    sampled = json.loads(next(out.glob("tuning_sampled_8_T0.2-p0.9-*.json")).read_text())
    assert [x["seed"] for x in sampled["runs"]] == [prompt_seed(0, p["id"]) for p in tune]
    recs = json.loads((out/"epochs1"/"records"/"served-8.json").read_text())["records"]
    assert [x["output_tokens"] for x in recs] == [len(x["output"]) for x in sampled["runs"]]
    assert all(x["temperature"] == 0.2 and "seed" in x for x in recs)
    # again: the drafter is reused, and its records read back without a model (none is given)
    from eagle3nb.settings import pipeline_config
    assert S.train_seed(pipeline_config(size="tiny"), base, out, "epochs1", 1, True)["how"] == "reused"
    assert S.drafter_records(None, out/"epochs1", tune, "served", sampled["runs"], 8, res["sampling"]) == recs


def test_round_results_and_their_tables():
    "A round from synthetic records: recipe and regen rows Holm-corrected together, the cells, the tables."
    seeds, cols = [0, 1, 2], ["greedy", "served"]
    level = {("baseline", "greedy"): [1.8, 1.8, 1.8], ("epochs2", "greedy"): [2.4, 2.5, 2.45],
             ("regen", "greedy"): [1.7, 1.9, 1.8], ("baseline", "served"): [1.5, 1.6, 1.55],
             ("epochs2", "served"): [1.5, 1.6, 1.55], ("regen", "served"): [1.6, 1.7, 1.65]}
    recs = {(a, c, sd): r for (a, c), xs in level.items() for sd, r in zip(seeds, arm(xs))}
    res = S.round_results(recs, ["epochs2"], seeds, cols, True, resamples=1000)
    assert res["m"] == 4 and [(r["kind"], r["arm"], r["column"]) for r in res["rows"]] == [
        ("recipe", "epochs2", "greedy"), ("regen", "regen", "greedy"), ("recipe", "epochs2", "served"),
        ("regen", "regen", "served")]
    assert res["rows"][0]["decision"] == "adopt" and res["rows"][2]["decision"] == "keep default"
    assert res["cells"]["regen"]["served"]["tok_fwd"] == pytest.approx(1.65, rel=0.05)
    assert set(res["default"]["greedy"]["seed_vs_seed0"]) == {"1", "2"}
    assert res["default"]["greedy"]["spread"]["relative_range"] == pytest.approx(0, abs=1e-9)
    md = S.markdown({**res, "seeds": seeds, "columns": cols, "resamples": 1000, "alpha": 0.05, "k_rule": "pooled",
                     "regen": {"cells": res["cells"], "sampling_words": "T=0.2, top-p 0.9"}})
    assert "| epochs2 | greedy |" in md and "sampled ÷ greedy" in md and "seed k ÷ seed 0" in md


def test_recipes_records_are_adopted_only_when_they_fit(tmp_path):
    "recipes.py's T=0 records beside a drafter: taken when of these prompts and answers and newer than the drafter."
    import os
    run, ddir = tmp_path/"baseline-seed1", tmp_path/"baseline-seed1"/"train"/"drafter"
    ddir.mkdir(parents=True)
    (ddir/"model.safetensors").write_text("w")
    tune = [{"id": f"p{i}", "prompt_ids": [1, i]} for i in range(3)]
    outputs = [[5] * 4, [6] * 2, [7] * 3]
    cell = {"target_forwards": 2, "drafts": 1, "draft_tokens": 1, "accepted_per_pos": [1]}
    recs = [{"id": t["id"], "conversation": t["id"], "set": "tuning", "output_tokens": len(o), "prompt": "",
             "by_k": {"eagle3": {str(k): cell for k in S.EAGLE_KS}, "ngram": {str(k): cell for k in S.NGRAM_KS}}}
            for t, o in zip(tune, outputs)]
    write = lambda rs: (run/"per_prompt.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rs))
    write(recs)
    os.utime(ddir/"model.safetensors", (1, 1))
    got = S.recipes_records(run, tune, outputs)
    assert got == [{**r, "temperature": 0.0} for r in recs]
    assert S.recipes_records(run, tune, [[5] * 4, [6] * 3, [7] * 3]) is None           # other answers
    write([dict(r, by_k={**r["by_k"], "eagle3": {"1": cell}}) for r in recs])
    assert S.recipes_records(run, tune, outputs) is None                               # other Ks
    write(recs)
    os.utime(ddir/"model.safetensors")                                                 # trained after the records
    os.utime(run/"per_prompt.jsonl", (2, 2))
    assert S.recipes_records(run, tune, outputs) is None
