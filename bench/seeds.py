"""Recipes decided over training seeds: each arm (a variant's training settings) trained with several seeds, every
drafter replayed on the base run's tuning prompts at T=0 *and* at the target's served sampling, and each arm compared
with the default by a bootstrap over seeds × conversations, the round's decisions corrected for how many were made.

    P=".venv/bin/python bench/seeds.py --base runs/base --out runs/seeds --size small --max_new_tokens 256"
    $P --seeds 0,1,2 --reuse_trained --arms epochs2,norms-off    # 1: recipe arms × 3 seeds, both columns, m = 4
    $P --make_regen runs/regen                                   # 2: RUN2, answers drawn at the served sampling
    $P --seeds 0,1,2 --reuse_trained --arms epochs2,norms-off --data_base runs/regen   # 3: + regen arm, 2×2, m = 6
    $P --markdown                                                # the tables of OUT/seeds_results.json

`--make_regen RUN2` runs the stages prepare, generate, validate, context, capture (`run_pipeline`) on the base's own
`pipeline_config.json` with `[generate] temperature = 0.2, top_p = 0.9, top_k = -1, seed = 0` (the served sampling;
per item the seed is `seed + sample`, so 0), then `check_regen`: for a base made by a plain `eagle3nb run`, as
runs/default was, the same as `eagle3nb run --run RUN2 --stages prepare,generate,validate,context,capture --set
generate.temperature=0.2 generate.top_p=0.9 generate.seed=0`. Drafters `recipes.py --set seed=k ARM` trained
already are reused (`--reuse_trained`), and so are the T=0 records it wrote beside them (`recipes_records`).
Each invocation rewrites OUT/seeds_results.json with the round of the arms it names.

An **arm** is a VARIANTS entry of `recipes.py` (its overrides on the size's training settings) trained once per seed
of `--seeds`; `train.seed` sets the drafter's initialisation, the batch order *and* the training held-out split (the
records it validates on, left out of training), so two seeds differ in all three and train on different records.
Seed k trains in `OUT/<arm>-seed<k>` and seed 0 in plain `OUT/<arm>`, the run directories `recipes.py --set seed=k
<arm>` makes, so `--reuse_trained` reuses their drafters. `baseline` (the default) is always an arm. `--data_base
RUN2` adds the arm `regen`: the default's settings trained on RUN2's capture, a run whose generated answers were
drawn at the served sampling (`--make_regen RUN2` makes it from the base's own `pipeline_config.json`, only
`[generate]` temperature, top-p, top-k and seed changed, and `check_regen` refuses it unless its prompts, context
records and every other setting equal the base's); it is measured on the base's tuning prompts and answers like
every arm.

**Evaluation columns.** `greedy`: the target's greedy answers (`tuning_outputs_N.json`, `recipes.py`'s cache).
`served`: one answer a tuning prompt drawn at the target's served sampling (`served_sampling`: the model card's T=0.2,
top-p 0.9 for SmolLM2) with the prompt's own seed (`prompt_seed(--sample_seed, id)`), through the local engine as the
evaluation's `answer_runs` draws them, cached as `tuning_sampled_N_<sampling>.json`; drafts replayed over it at every
K (argmax drafts are accepted exactly when they equal the token the sampler drew). Per-prompt records of every
drafter in each column are kept in `OUT/<run>/records/<column>-N.json`.

**K.** Per arm and column, the one K with the highest tokens per forward pooled over all of the arm's seeds on the
tuning prompts (`choose_k` over the seeds' records together); every seed and every resample uses that K.

**Interval.** Each resample draws conversations with replacement (the same draw for both arms: paired) and, for each
arm independently, its seeds with replacement; an arm's figure is Σ output tokens ÷ Σ target forwards over the drawn
seeds × drawn conversations, the resample's ratio is A's ÷ B's; percentile intervals (`seed_bootstrap`). With one seed
(or seeds that agree exactly) it is `power.paired_bootstrap`'s interval, draw for draw. With 3 seeds the seed draw
takes 10 distinct multisets and its variance is (S − 1)/S of the seeds' own: it understates run-to-run spread a
little, so the per-seed figures are printed beside every interval.

**Decision.** Every comparison written in one invocation (each arm vs the default in each column, and regen ÷ default
in each column) is one of the round's m tests. Each gets a bootstrap p (twice the share of resampled ratios on the far
side of 1) and Holm–Bonferroni's step-down: the i-th smallest p is tested at α/(m − i + 1), α = 0.05, and the
**corrected interval** is the percentile interval at that level. "adopt": the corrected interval's lower end is above
1 (and every row with a smaller p was rejected: Holm stops at the first it keeps); "worse": its upper end below 1;
else "keep default". The default's own seed spread is a row (per-seed tokens per forward, min–max, and each seed ÷
seed 0 with its conversation-paired interval). Results:
`OUT/seeds_results.json`; `markdown(results)` renders its tables.

The K is chosen on the prompts the ratio is measured on: fine for choosing a recipe, never for a drafter's figure."""
import argparse, json, sys, time
from dataclasses import asdict
from pathlib import Path
import numpy as np
from eagle3nb.core import Run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recipes import (EAGLE_KS, NGRAM_KS, VARIANTS, digest, file_digest, in_main_job_root, items_len,  # noqa: E402
                     trained_as, tuning_set, variant_run)

ALPHA, RESAMPLES = 0.05, 4000
REGEN = "regen"   # the arm trained on --data_base: the default's settings on answers drawn at the served sampling
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "seed")   # what --make_regen changes in [generate]


# --- statistics: records in, numbers out (no model) -------------------------------------------------------------

def arm_counts(recs_by_seed:list, # per seed, that drafter's per-prompt records (the same prompts in the same order)
               k:int, method:str="eagle3") -> tuple:
    "`(conversations, tokens [S, P], forwards [S, P])` of one arm at K `k`, one row a seed."
    ids = [r["id"] for r in recs_by_seed[0]]
    for s, recs in enumerate(recs_by_seed):
        if [r["id"] for r in recs] != ids:
            raise ValueError(f"seed {s}'s records are not the prompts of seed 0 in the same order: replay both on "
                             "the same tuning prompts")
    tok = np.array([[r["output_tokens"] for r in recs] for recs in recs_by_seed], dtype=float)
    fwd = np.array([[r["by_k"][method][str(k)]["target_forwards"] for r in recs] for recs in recs_by_seed],
                   dtype=float)
    return [r["conversation"] for r in recs_by_seed[0]], tok, fwd


def seed_bootstrap(groups:list, # the conversation of each prompt (both arms: the same prompts)
                   arms:dict, # arm name → `(tokens [S, P], forwards [S, P])`; the first two give the ratio
                   resamples:int=RESAMPLES, seed:int=0) -> dict:
    ("Per resample each arm's pooled tokens per forward over its resampled seeds × the (shared) resampled "
     "conversations, and arm0 ÷ arm1: `{arm: draws, 'ratio': draws}` (numpy arrays, `resamples` long).")
    index = {c: i for i, c in enumerate(dict.fromkeys(groups))}
    g, n = np.array([index[c] for c in groups]), len(index)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n))   # conversations first: `paired_bootstrap`'s draws exactly
    conv_w = np.stack([np.bincount(d, minlength=n) for d in draws]).astype(float)   # [R, C] times drawn
    out = {}
    for name, (tok, fwd) in arms.items():
        tok, fwd = np.atleast_2d(tok), np.atleast_2d(fwd)
        S = tok.shape[0]
        per_conv = lambda x: np.stack([np.bincount(g, weights=row, minlength=n) for row in x])   # [S, C]
        seed_w = np.stack([np.bincount(d, minlength=S) for d in rng.integers(0, S, size=(resamples, S))])
        t = np.einsum("rs,sc,rc->r", seed_w, per_conv(tok), conv_w)
        f = np.einsum("rs,sc,rc->r", seed_w, per_conv(fwd), conv_w)
        out[name] = t / f
    if len(arms) >= 2:
        a0, a1 = list(arms)[:2]
        out["ratio"] = out[a0] / out[a1]
    return out


def interval(draws, level:float=0.95) -> list:
    "The percentile interval of `draws` at `level`."
    return [round(float(v), 4) for v in np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])]


def boot_p(ratio_draws) -> float:
    "Two-sided bootstrap p of ratio = 1: twice the share of resampled ratios on the far side of 1 (at most 1)."
    r = np.asarray(ratio_draws)
    return float(min(1.0, 2 * min((r <= 1).mean(), (r >= 1).mean())))


def holm(ps:list, alpha:float=ALPHA) -> list:
    ("Holm–Bonferroni over a round's p values: per test `{rank, level, p_adjusted, reached}` — the level its corrected "
     "interval is taken at (1 − α/(m − rank)), its adjusted p, and whether the step-down reached it.")
    m, order = len(ps), sorted(range(len(ps)), key=lambda i: ps[i])
    out, running, reached = [None] * m, 0.0, True
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = {"rank": rank, "level": 1 - alpha / (m - rank), "p_adjusted": round(running, 4), "reached": reached}
        reached = reached and ps[i] <= alpha / (m - rank)
    return out


def decide(ci:list, reached:bool) -> str:
    "adopt (corrected interval above 1), worse (below 1), else keep default; Holm's step-down must reach the row."
    if reached and ci[0] > 1: return "adopt"
    if reached and ci[1] < 1: return "worse"
    return "keep default"


def pooled(recs_by_seed:list, k:int, method:str="eagle3") -> float:
    "An arm's tokens per forward at `k` pooled over its seeds and prompts."
    _, t, f = arm_counts(recs_by_seed, k, method)
    return float(t.sum() / f.sum())


def arm_k(recs_by_seed:list, method:str="eagle3") -> int:
    "The arm's K: `choose_k` over all of its seeds' records together (pooled tokens per forward; ties: smaller K)."
    from eagle3nb.power import choose_k
    return choose_k([r for recs in recs_by_seed for r in recs], method)


def spread(recs_by_seed:list, k:int, seeds:list) -> dict:
    "Each seed's tokens per forward at `k`, their min–max and (max − min) ÷ pooled."
    per = {str(s): round(pooled([recs], k), 4) for s, recs in zip(seeds, recs_by_seed)}
    allv, p = list(per.values()), pooled(recs_by_seed, k)
    return {"per_seed": per, "min": min(allv), "max": max(allv), "pooled": round(p, 4),
            "relative_range": round((max(allv) - min(allv)) / p, 4)}


def compare_arms(a:list, b:list, # per seed, the records of arm A (the variant) and of arm B (the default)
                 seeds_a:list, seeds_b:list, resamples:int=RESAMPLES, seed:int=0) -> dict:
    "A ÷ B, each at its own pooled-over-seeds K: the ratio, its 95 % seeds × conversations interval, draws, spreads."
    if [r["id"] for r in a[0]] != [r["id"] for r in b[0]] or \
       [r["output_tokens"] for r in a[0]] != [r["output_tokens"] for r in b[0]]:
        raise ValueError("the two arms' records are not the same prompts and answers")
    ka, kb = arm_k(a), arm_k(b)
    groups, ta, fa = arm_counts(a, ka)
    _, tb, fb = arm_counts(b, kb)
    draws = seed_bootstrap(groups, {"a": (ta, fa), "b": (tb, fb)}, resamples, seed)
    ratio = pooled(a, ka) / pooled(b, kb)
    return {"ratio": round(ratio, 4), "ci95": interval(draws["ratio"]), "p": boot_p(draws["ratio"]),
            "k": {"a": ka, "b": kb}, "tok_fwd": {"a": round(pooled(a, ka), 4), "b": round(pooled(b, kb), 4)},
            "ci95_arm": {"a": interval(draws["a"]), "b": interval(draws["b"])},
            "spread": {"a": spread(a, ka, seeds_a), "b": spread(b, kb, seeds_b)}, "_draws": draws["ratio"],
            "n_prompts": len(groups), "n_conversations": len(set(groups)), "seeds": {"a": seeds_a, "b": seeds_b},
            "bootstrap": {"resamples": resamples, "seed": seed}}


def correct_round(rows:list, alpha:float=ALPHA) -> list:
    "Holm–Bonferroni over the round's comparison rows: each row's corrected interval, adjusted p and decision."
    h = holm([r["p"] for r in rows], alpha)
    out = []
    for r, c in zip(rows, h):
        ci = interval(r["_draws"], c["level"])
        out.append({**{k: v for k, v in r.items() if k != "_draws"}, "holm": {**c, "m": len(rows)},
                    "ci_corrected": ci, "decision": decide(ci, c["reached"])})
    return out


def round_results(recs:dict, # (arm, column, seed) → that drafter's per-prompt records
                  arms:list, seeds:list, columns:list, regen:bool, resamples:int=RESAMPLES) -> dict:
    ("The round from the records: every arm (and regen) ÷ the default in each column, Holm-corrected; the default's "
     "seed spread (and each seed ÷ seed 0); the regeneration cells; n-gram for scale.")
    by = lambda arm, col: [recs[arm, col, sd] for sd in seeds]
    rows = []
    for col in columns:
        for arm in arms + ([REGEN] if regen else []):
            r = compare_arms(by(arm, col), by("baseline", col), seeds, seeds, resamples)
            rows.append({"kind": "regen" if arm == REGEN else "recipe", "arm": arm, "column": col,
                         "overrides": VARIANTS["baseline" if arm == REGEN else arm], **r})
    rows = correct_round(rows) if rows else []
    default, ngram, cells = {}, {}, {}
    for col in columns:
        for arm in ["baseline"] + ([REGEN] if regen else []):
            k = arm_k(by(arm, col))
            g, t, f = arm_counts(by(arm, col), k)
            cells.setdefault(arm, {})[col] = {"k": k, "tok_fwd": round(pooled(by(arm, col), k), 4),
                                              "ci95": interval(seed_bootstrap(g, {arm: (t, f)}, resamples)[arm]),
                                              "spread": spread(by(arm, col), k, seeds)}
        d = by("baseline", col)
        pairs = {str(sd): compare_arms([x], d[:1], [sd], seeds[:1], resamples) for sd, x in zip(seeds[1:], d[1:])}
        default[col] = {**cells["baseline"][col], "seed_vs_seed0": {
            sd: {"ratio": p["ratio"], "ci95": p["ci95"], "k": p["k"]["a"]} for sd, p in pairs.items()}}
        kg = arm_k(d, "ngram")
        ngram[col] = {"k": kg, "tok_fwd": round(pooled(d[:1], kg, "ngram"), 4)}
    return {"m": len(rows), "rows": rows, "default": default, "ngram": ngram, "cells": cells}


# --- rendering ----------------------------------------------------------------------------------------------------

def _ci(x, ci) -> str: return f"{x:.3f} [{ci[0]:.3f}–{ci[1]:.3f}]"


def _seeds(s:dict) -> str:
    return f"{s['min']:.3f}–{s['max']:.3f} ({', '.join(f'{v:.3f}' for v in s['per_seed'].values())})"


def markdown(res:dict) -> str:
    "The results file's tables as Markdown: recipe rows, the default's seed spread, and the regeneration 2 × 2."
    from eagle3nb.core import md_table
    cols = res["columns"]
    out = [f"Arms trained with seeds {res['seeds']}; interval: bootstrap over seeds × conversations "
           f"({res['resamples']} resamples); decisions Holm–Bonferroni over the round's {res['m']} comparisons "
           f"(α = {res['alpha']}). K: {res['k_rule']}", ""]
    rows = [[r["arm"], r["column"], f"{r['k']['a']} / {r['k']['b']}", _ci(r["ratio"], r["ci95"]),
             f"[{r['ci_corrected'][0]:.3f}–{r['ci_corrected'][1]:.3f}] ({r['holm']['level']:.4f})",
             f"{r['holm']['p_adjusted']:.4f}", _seeds(r["spread"]["a"]), _seeds(r["spread"]["b"]), r["decision"]]
            for r in res["rows"] if r["kind"] == "recipe"]
    if rows:
        out += ["**Recipes** (variant ÷ default, tokens per target forward on the tuning prompts)", "",
                md_table(["arm", "answers", "K arm / default", "ratio [95 %]", "corrected [level]", "Holm p",
                          "arm per seed", "default per seed", "decision"], rows), ""]
    out += ["**The default's seed spread**", "",
            md_table(["answers", "K", "pooled [95 %]", "per seed", "min–max ÷ pooled", "seed k ÷ seed 0 [95 %]"],
                     [[c, d["k"], _ci(d["spread"]["pooled"], d["ci95"]), _seeds(d["spread"]),
                       f"{d['spread']['relative_range']:.3f}",
                       "; ".join(f"{k}: {_ci(p['ratio'], p['ci95'])}" for k, p in d["seed_vs_seed0"].items())]
                      for c, d in res["default"].items()]), ""]
    if res.get("regen"):
        g = res["regen"]
        cell = lambda arm, c: _ci(g["cells"][arm][c]["tok_fwd"], g["cells"][arm][c]["ci95"])
        rr = {r["column"]: r for r in res["rows"] if r["kind"] == "regen"}
        out += [f"**Regeneration** (drafter trained on greedy vs {g['sampling_words']} answers; "
                "tokens per target forward, each arm at its own K)", "",
                md_table(["trained on"] + [f"evaluated {c}" for c in cols],
                         [["greedy answers (default)"] + [cell("baseline", c) for c in cols],
                          ["sampled answers (regen)"] + [cell(REGEN, c) for c in cols],
                          ["sampled ÷ greedy"] + [f"{_ci(rr[c]['ratio'], rr[c]['ci95'])}, corrected "
                                                  f"[{rr[c]['ci_corrected'][0]:.3f}–{rr[c]['ci_corrected'][1]:.3f}]"
                                                  f": {rr[c]['decision']}" for c in cols],
                          ["n-gram (for scale)"] + [f"{res['ngram'][c]['tok_fwd']:.3f} (K={res['ngram'][c]['k']})"
                                                    for c in cols]]), ""]
    return "\n".join(out)


# --- runs: training, answers, replay ------------------------------------------------------------------------------

def seed_run_name(arm:str, seed:int) -> str:
    "`recipes.py --set seed=k ARM`'s run directory name: `ARM-seedK`, plain `ARM` for seed 0."
    return arm if seed == 0 else f"{arm}-seed{seed}"


def arm_settings(c, arm:str, seed:int) -> dict:
    "The training settings of an arm at a seed: the size's, the variant's overrides, `seed`."
    return {**asdict(c.train), **VARIANTS["baseline" if arm == REGEN else arm], "seed": seed}


def served(tgt) -> dict:
    "The target's served sampling (`served_sampling`); an error where it has none."
    from eagle3nb.core import InputError
    from eagle3nb.models import served_sampling
    s = served_sampling(tgt.path)
    if not s or not s["temperature"] > 0: raise InputError(f"{tgt.path}: no served sampling (generation_config.json "
                                                           "or MODEL_CARD_SAMPLING); --columns greedy only")
    return s


def sampling_label(s:dict, seed:int) -> str:
    return f"T{s['temperature']}-p{s['top_p']}-k{s['top_k']}-s{seed}"


def sampled_answers(model, tgt, eos:list, tune:list, max_new_tokens:int, s:dict, seed:int, cache:Path) -> list:
    ("One answer a tuning prompt drawn at sampling `s` with its own seed (`prompt_seed`), its tail drawn alike, "
     "through the local engine as the evaluation's `answer_runs` does; cached in `cache` (keyed by all of it).")
    from eagle3nb.evaluate import prompt_seed
    from eagle3nb.local import LocalEngine
    from eagle3nb.protocol import Sampling
    from eagle3nb.replay import greedy_runs
    import torch
    key = {"sampling": {k: s[k] for k in ("temperature", "top_p", "top_k")}, "seed": seed,
           "max_new_tokens": max_new_tokens, "tail": max(list(EAGLE_KS) + list(NGRAM_KS)),
           "prompts": digest([(p["id"], p["prompt_ids"]) for p in tune])}
    if cache.exists() and (o := json.loads(cache.read_text()))["key"] == key: return o["runs"]
    engine = LocalEngine(tgt, "float32", "cpu", max_batch=8, threads=torch.get_num_threads())
    engine._model = model                                             # one copy of the weights
    seeds = [prompt_seed(seed, p["id"]) for p in tune]
    sp = Sampling(max_new_tokens=max_new_tokens, temperature=s["temperature"], top_p=s["top_p"], top_k=s["top_k"])
    runs = greedy_runs(model, [p["prompt_ids"] for p in tune], max_new_tokens, eos, key["tail"], None, 8, engine,
                       sp, seeds)
    runs = [{"id": p["id"], "seed": sd, "output": r["output"], "tail": r["tail"]}
            for p, r, sd in zip(tune, runs, seeds)]
    cache.write_text(json.dumps({"key": key, "source": s.get("source"), "runs": runs}))
    return runs


def greedy_answers(model, eos:list, tune:list, max_new_tokens:int, cache:Path) -> list:
    "The target's greedy answers of the tuning prompts: `recipes.py`'s cache `tuning_outputs_N.json`, else decoded."
    from eagle3nb.replay import greedy_runs
    if cache.exists(): return json.loads(cache.read_text())
    runs = greedy_runs(model, [p["prompt_ids"] for p in tune], max_new_tokens, eos)
    outputs = [r["output"] for r in runs]
    cache.write_text(json.dumps(outputs))
    return outputs


def drafter_records(model, run:Path, tune:list, column:str, answers:list, max_new_tokens:int,
                    sampling:dict|None) -> list:
    ("Per-prompt records (`per_prompt_records`, every K of the drafter and n-gram) of `run`'s drafter over one "
     "column's answers, stored in RUN/records/ keyed by the drafter's weights and the answers.")
    from eagle3nb.drafter import load_drafter
    from eagle3nb.replay import per_prompt_records, replay_prompts
    ddir = Run(run).drafter_dir
    key = {"drafter": digest([file_digest(f) for f in sorted(ddir.iterdir()) if f.is_file()]),
           "answers": digest(answers), "prompts": digest([(p["id"], p["prompt_ids"]) for p in tune]),
           "max_new_tokens": max_new_tokens, "eagle_ks": list(EAGLE_KS), "ngram_ks": list(NGRAM_KS)}
    path = run/"records"/f"{column}-{max_new_tokens}.json"
    if path.exists() and (o := json.loads(path.read_text()))["key"] == key: return o["records"]
    if sampling is None and (recs := recipes_records(run, tune, answers)) is not None:
        return store(path, key, recs, "bench/recipes.py's " + str(run/"per_prompt.jsonl"))
    d = load_drafter(ddir)
    runs = runs_with_aux(model, tune, answers, d.config.aux_layers_hf)
    per = replay_prompts(model, d, [(p["id"], p["prompt_ids"]) for p in tune], runs, EAGLE_KS, NGRAM_KS, [(2, 4)])
    recs = per_prompt_records(per, tune, "tuning", {"eagle3": "eagle3", "ngram": "ngram2-4"})
    T = sampling["temperature"] if sampling else 0.0
    recs = [{**r, "temperature": T, **({"seed": a["seed"]} if sampling else {})} for r, a in zip(recs, answers)]
    return store(path, key, recs, "replayed here")


_AUX = {}   # one column's answers → their runs with the target's aux states, computed once for every drafter


def runs_with_aux(model, tune:list, answers:list, aux_layers:list) -> list:
    ("Each answer as `replay_prompts` takes it, `{output, tail, aux}`: the target's states of prompt + answer from one "
     "prefill (and a greedy answer's tail), kept in memory so the target runs once a column, not once a drafter.")
    from eagle3nb.replay import tail_and_aux
    key = (digest(answers), tuple(aux_layers))
    if key not in _AUX:
        need, out = max(list(EAGLE_KS) + list(NGRAM_KS)), []
        for p, a in zip(tune, answers):
            o = a if isinstance(a, list) else a["output"]
            tail, aux = tail_and_aux(model, p["prompt_ids"] + o, need if isinstance(a, list) else 0, aux_layers)
            out.append({"output": o, "tail": tail if isinstance(a, list) else a["tail"], "aux": aux})
        _AUX[key] = out
    return _AUX[key]


def store(path:Path, key:dict, recs:list, source:str) -> list:
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"key": key, "source": source, "records": recs}))
    return recs


def recipes_records(run:Path, tune:list, outputs:list) -> list|None:
    ("The T=0 records `recipes.py` wrote beside this drafter (RUN/per_prompt.jsonl), where they are of these tuning "
     "prompts and greedy answers and were written after the drafter: the same replay, not run twice; else None.")
    p, ddir = run/"per_prompt.jsonl", Run(run).drafter_dir   # recipes.py's file, beside the run's stages
    if not p.exists() or p.stat().st_mtime < max(f.stat().st_mtime for f in ddir.iterdir()): return None
    recs = [json.loads(x) for x in open(p)]
    if [(r["id"], r["output_tokens"]) for r in recs] != [(q["id"], len(o)) for q, o in zip(tune, outputs)]: return None
    if any(set(r["by_k"]["eagle3"]) != {str(k) for k in EAGLE_KS} or
           set(r["by_k"]["ngram"]) != {str(k) for k in NGRAM_KS} for r in recs): return None
    return [{**r, "temperature": 0.0} for r in recs]


def train_seed(c, data_base:Path, out:Path, arm:str, seed:int, reuse:bool) -> dict:
    "One arm's drafter at one seed in `OUT/seed_run_name(arm, seed)` (reused where trained with exactly its settings)."
    from eagle3nb.core import read_manifest
    from eagle3nb.train import train
    run = variant_run(data_base, out, seed_run_name(arm, seed), None, True)
    settings, t0 = arm_settings(c, arm, seed), time.time()
    if reuse and trained_as(run, settings):
        m, how = read_manifest(Run(run).train_dir), "reused"
    else:
        m, how = train(run, aux_layers=c.capture.aux_layers, fresh=True, progress=False, **settings), "trained"
    return {"run": str(run), "seed": seed, "how": how, "train_steps": m["counts"]["steps"],
            "train_records": m["counts"]["train_records"], "train_tokens": sum(items_len(run)),
            "train_seconds": round(m["timings"]["seconds"] if how == "reused" else time.time() - t0, 1),
            "train_heldout": (m.get("final") or {}).get("heldout")}


# --- the regenerated base ------------------------------------------------------------------------------------------

def regen_config(base:Path, run2:Path, s:dict, seed:int) -> dict:
    "The base's `pipeline_config.json` with `run` = RUN2 and `[generate]` at sampling `s` with base seed `seed`."
    cfg = json.loads((base/"pipeline_config.json").read_text())
    cfg["run"] = str(run2)
    cfg["generate"].update(temperature=s["temperature"], top_p=s["top_p"], top_k=s["top_k"], seed=seed)
    return cfg


def make_regen(base:Path, run2:Path, s:dict, seed:int):
    "RUN2: the base's prepare → capture stages with only the generated answers' sampling changed, then checked."
    from eagle3nb.pipeline import run_pipeline
    from eagle3nb.settings import pipeline_config
    cfg = regen_config(base, run2, s, seed)
    run_pipeline(pipeline_config(cfg), stages=["prepare", "generate", "validate", "context", "capture"])
    return check_regen(base, run2)


def _lines(p:Path) -> list: return [json.loads(x) for x in open(p)] if p.exists() else []


def check_regen(base:Path, run2:Path) -> dict:
    ("RUN2 against the base: every setting but `run` and `[generate]`'s sampling equal, the same prompts, the same "
     "context records, generations for the same prompts drawn at RUN2's sampling; else an error naming the difference.")
    from eagle3nb.core import InputError
    a, b = (json.loads((r/"pipeline_config.json").read_text()) for r in (base, run2))
    drop = lambda c: {k: ({f: x for f, x in v.items() if f not in SAMPLING_FIELDS} if k == "generate" else v)
                      for k, v in c.items() if k != "run"}
    if drop(a) != drop(b):
        diff = [k for k in drop(a) if drop(a)[k] != drop(b).get(k)]
        raise InputError(f"{run2}/pipeline_config.json: sections {diff} differ from {base}'s beyond [generate] "
                         "sampling; make RUN2 with `bench/seeds.py --make_regen RUN2`")
    for f in ("prompts/prompts.jsonl", "generate_prompts.jsonl", "context/records.jsonl"):
        if file_digest(base/f) != file_digest(run2/f):
            raise InputError(f"{run2/f} differs from {base/f}: RUN2 must differ from the base only in its answers")
    ga, gb = _lines(base/"generate"/"generations.jsonl"), _lines(run2/"generate"/"generations.jsonl")
    pa, pb = {g["id"]: g["prompt_ids"] for g in ga}, {g["id"]: g["prompt_ids"] for g in gb}
    if pa != pb: raise InputError(f"{run2}/generate: generations for other prompts than {base}'s "
                                  f"({len(set(pa) ^ set(pb))} ids differ)")
    sampling = {tuple(sorted((k, g["sampling"][k]) for k in SAMPLING_FIELDS)) for g in gb}
    oa = {g["id"]: g["output_ids"] for g in ga}
    same = sum(oa[g["id"]] == g["output_ids"] for g in gb)
    return {"generations": len(gb), "answers_identical_to_base": same, "sampling": [dict(s) for s in sampling],
            "checked": "pipeline settings equal but [generate] sampling; prompts, generate prompts and context "
                       "records byte-identical; generations for the same prompts"}


# --- the round -----------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="runs/base")
    ap.add_argument("--out", default="runs/seeds")
    ap.add_argument("--size", default="small")
    ap.add_argument("--max_new_tokens", type=int, default=256)
    ap.add_argument("--seeds", default="0,1,2", help="training seeds per arm, comma-separated")
    ap.add_argument("--arms", default="epochs2,norms-off", help="VARIANTS compared with the default, comma-separated")
    ap.add_argument("--data_base", default=None, help="RUN2: add the regen arm trained on its capture")
    ap.add_argument("--make_regen", default=None, help="make RUN2 from --base at the served sampling, check it, stop")
    ap.add_argument("--columns", default="greedy,served", help="answers measured on: greedy (T=0), served")
    ap.add_argument("--sample_seed", type=int, default=0, help="sampled answers' base seed (`prompt_seed`)")
    ap.add_argument("--reuse_trained", action="store_true")
    ap.add_argument("--resamples", type=int, default=RESAMPLES)
    ap.add_argument("--markdown", action="store_true", help="print OUT/seeds_results.json's tables and stop")
    a = ap.parse_args()
    base, out = Path(a.base), Path(a.out)
    if a.markdown: return print(markdown(json.loads((out/"seeds_results.json").read_text())))
    import torch
    from eagle3nb.heldout import check_drafter_heldout
    from eagle3nb.models import eos_ids, load_target
    from eagle3nb.settings import pipeline_config
    c = pipeline_config(size=a.size)
    tgt = load_target(c.target)
    if a.make_regen:
        info = make_regen(base, Path(a.make_regen), served(tgt), a.sample_seed)
        return print(json.dumps(info, indent=1))
    seeds, arms = [int(s) for s in a.seeds.split(",")], [x for x in a.arms.split(",") if x]
    if bad := [x for x in arms if x not in VARIANTS]: raise SystemExit(f"--arms: {bad} not in VARIANTS")
    columns = [x for x in a.columns.split(",") if x]
    all_arms = ["baseline"] + arms + ([REGEN] if a.data_base else [])
    regen_info = check_regen(base, Path(a.data_base)) if a.data_base else None
    out.mkdir(parents=True, exist_ok=True)
    tune = tuning_set(base, c)
    model, eos = tgt.load_model("float32", "cpu"), eos_ids(tgt.path, tgt.tokenizer)
    s = served(tgt) if "served" in columns else None
    n = a.max_new_tokens
    answers = {"greedy": greedy_answers(model, eos, tune, n, out/f"tuning_outputs_{n}.json")}
    if s:
        answers["served"] = sampled_answers(model, tgt, eos, tune, a.max_new_tokens, s, a.sample_seed,
                                            out/f"tuning_sampled_{a.max_new_tokens}_{sampling_label(s, a.sample_seed)}"
                                                ".json")
    trained, recs = {}, {}
    for arm in all_arms:
        data = Path(a.data_base) if arm == REGEN else base
        for sd in seeds:
            t = train_seed(c, data, out, arm, sd, a.reuse_trained)
            run = Path(t["run"])
            with in_main_job_root(data): t["heldout_check"] = check_drafter_heldout(
                tune, Run(run.resolve()).drafter_dir, "tuning prompts")
            trained[f"{arm}/{sd}"] = t
            for col in columns:
                recs[arm, col, sd] = drafter_records(model, run, tune, col, answers[col], a.max_new_tokens,
                                                     s if col == "served" else None)
            print(f"{arm} seed {sd}: {t['how']}, " + ", ".join(
                f"{col} {pooled([recs[arm, col, sd]], arm_k([recs[arm, col, sd]])):.3f}" for col in columns),
                flush=True)
    res = {**round_results(recs, arms, seeds, columns, bool(a.data_base), a.resamples), "trained": trained}
    res = {"base": str(base), "out": str(out), "size": a.size, "max_new_tokens": a.max_new_tokens, "seeds": seeds,
           "tuning_prompts": len(tune), "columns": columns, "resamples": a.resamples, "alpha": ALPHA,
           "sampling": s, "sample_seed": a.sample_seed, "threads": torch.get_num_threads(),
           "k_rule": "per arm and column, the K with the highest tokens per forward pooled over all of the arm's "
                     "seeds on the tuning prompts (choose_k over the seeds' records together)",
           "seed_changes": "train.seed: the drafter's initialisation, the batch order and the training held-out split",
           "correction": "Holm–Bonferroni over the round's m comparisons; corrected interval at 1 − α/(m − rank)",
           "command": " ".join(["python bench/seeds.py"] + sys.argv[1:]), **res}
    if not a.data_base: res.pop("cells")
    else:
        res["regen"] = {"data_base": a.data_base, "check": regen_info, "cells": res.pop("cells"),
                        "sampling_words": f"T={s['temperature']}, top-p {s['top_p']}" if s else "sampled"}
    (out/"seeds_results.json").write_text(json.dumps(res, indent=1))
    print(markdown(res))


if __name__ == "__main__":
    sys.exit(main())
