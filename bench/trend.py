"""Where more training pays: a run's drafter scored at every kept checkpoint on held-out prompts, with intervals.

    .venv/bin/python bench/trend.py --run small=runs/default --run medium=runs/medium \
        --prompts runs/medium/evaluate_prompts.jsonl --out nbs/results/trend.json

Each run must keep its checkpoints (`--set train.keep_checkpoints=0`; a run without them gives its final drafter
only). Each checkpoint's drafter is replayed at every K up to twice its training K on the same prompts and the same
greedy answers (one batched greedy run, `replay.measure_replay`), n-gram beside it at each of the evaluation's
lookup settings and K up to 20; each method at its best K on these prompts (the trend is what is read here, not a
headline), a paired bootstrap over conversations for the intervals (`power.power_block`): the scoring of
`eagle3nb.checkpoints.score_drafter`, what `[train] select = "tuning"` chooses by. Training tokens are steps ×
`batch_tokens` (padded), CPU minutes the training stage's seconds spread evenly over its steps (the machine's load is
stated, not controlled). Writes OUT (JSON) and OUT with .png: tokens per target forward against training tokens and
CPU minutes, n-gram's band across.

    .venv/bin/python bench/trend.py --reach nbs/results/trend.json

adds (or refreshes) `reach` in an existing trend file without scoring anything: `reach` below."""
import argparse, json, math, random, time
from pathlib import Path


def _fit(pts:list) -> tuple:
    "`(intercept, slope)` of tokens per forward on log2(training tokens), least squares; slope NaN if x never varies."
    xs = [math.log2(p["train_tokens"]) for p in pts]
    ys = [p["tokens_per_forward"]["eagle3"] for p in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0: return my, math.nan
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def _doublings(a:float, b:float, x_last:float, target:float) -> float:
    "Doublings of training tokens past `x_last` (log2) until the line `a + b x` reaches `target`; inf if it never does."
    if not b > 0: return math.inf
    return (target - a) / b - x_last


def _pct(v:list, q:float) -> float:
    "The `q` quantile of `v` (sorted, nearest rank): inf where the rank falls among the resamples that never reach."
    v = sorted(v)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def reach(out:dict, label:str="medium", resamples:int=2000, seed:int=0) -> dict:
    ("Doublings of training tokens (and CPU hours) past `label`'s last checkpoint for its fitted line to reach three "
     "marks: n-gram's lower bound, n-gram's point estimate, and a *beats* verdict (the drafter/n-gram ratio's lower "
     "bound above 1, taking the last checkpoint's relative ratio interval as it stands); each with a 95% percentile "
     "interval from a bootstrap over the run's checkpoints, and the fits of its first and second halves beside. It "
     "extrapolates one run's steps over fixed data: more steps on the same records, not more data.")
    pts = [p for p in out["points"] if p["label"] == label]
    if len(pts) < 3: raise ValueError(f"{label!r}: {len(pts)} checkpoints in the trend file; a fit needs 3 or more")
    last = pts[-1]
    ng, (r, r_lo) = last["tokens_per_forward"]["ngram"], (last["ratio"], last["ci95"]["ratio"][0])
    marks = {"ngram_lower": last["ci95"]["ngram"][0], "ngram_point": ng, "beats": ng * r / r_lo}
    x_last = math.log2(last["train_tokens"])
    rng, boots = random.Random(seed), []
    for _ in range(resamples):
        boots.append(_fit([pts[rng.randrange(len(pts))] for _ in pts]))
    a, b = _fit(pts)
    half = len(pts) // 2
    halves = {"first_half": _fit(pts[:half]), "second_half": _fit(pts[half:])}
    hours = lambda d: round(last["cpu_minutes"] * 2 ** d / 60, 1) if math.isfinite(d) else math.inf
    res = {"label": label, "checkpoints": len(pts), "slope_per_doubling": round(b, 4),
           "slope_ci95": [round(_pct([s for _, s in boots], q), 4) for q in (0.025, 0.975)],
           "fitted_last": round(a + b * x_last, 4), "cpu_minutes_last": last["cpu_minutes"],
           "resamples": resamples, "seed": seed, "marks": {}}
    for m, target in marks.items():
        d = _doublings(a, b, x_last, target)
        ds = [_doublings(ba, bb, x_last, target) for ba, bb in boots]
        ci = [_pct(ds, q) for q in (0.025, 0.975)]
        res["marks"][m] = {"tokens_per_forward": round(target, 4), "doublings": round(d, 2),
                           "doublings_ci95": [round(c, 2) for c in ci], "cpu_hours": hours(d),
                           "cpu_hours_ci95": [hours(c) for c in ci],
                           **{h: round(_doublings(*f, x_last, target), 2) for h, f in halves.items()}}
    res["words"] = (f"An extrapolation of one run ({label}: {len(pts)} nested checkpoints of one cosine-decayed run, "
                    "one seed) over its steps on fixed data, not a measurement of more data; the interval resamples "
                    "its checkpoints as if independent (they are not: it is too narrow), and the two halves' fits show "
                    "how far the line itself moves.")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="append", default=[],
                    help="LABEL=RUN, repeatable: a run trained with --set train.keep_checkpoints=0")
    ap.add_argument("--prompts", default=None, help="held-out prompt records (default: the first run's "
                    "evaluate_prompts.jsonl); every drafter is screened against them")
    ap.add_argument("--n", type=int, default=64, help="the first N prompts")
    ap.add_argument("--max_new_tokens", type=int, default=256)
    ap.add_argument("--batch_size", type=int, default=16)
    ap.add_argument("--out", default="runs/trend.json")
    ap.add_argument("--reach", default=None, help="a trend file: add `reach` to it and stop (no scoring)")
    a = ap.parse_args()
    if a.reach:
        out = json.loads(Path(a.reach).read_text())
        out["reach"] = reach(out)
        Path(a.reach).write_text(json.dumps(out, indent=1))
        print(json.dumps(out["reach"], indent=1))
        return
    if not a.run: ap.error("--run LABEL=RUN is required (or --reach TREND_JSON)")
    from eagle3nb.checkpoints import (checkpoint_drafter, checkpoint_facts, kept_checkpoints, score_drafter,
                                      step_losses)
    from eagle3nb.core import read_json, read_jsonl
    from eagle3nb.drafter import load_drafter
    from eagle3nb.replay import measure_replay, ngram_name
    from eagle3nb.heldout import screen_drafter_heldout
    from eagle3nb.local import LocalEngine
    from eagle3nb.models import eos_ids, load_target
    from eagle3nb.settings import pipeline_config
    runs = [(lab, Path(r)) for lab, r in (e.split("=", 1) if "=" in e else (Path(e).name, e) for e in a.run)]
    run, t0 = runs[0][1], time.time()
    recs = read_jsonl(a.prompts or run/"evaluate_prompts.jsonl")[:a.n]
    points = []
    for lab, r in runs:   # every kept checkpoint (the last is the final drafter), or the final drafter alone
        points += [(lab, r, p) for p in kept_checkpoints(r)] or [(lab, r, None)]
    for _, r, _ in points:   # every drafter: these prompts are none of its training conversations or near copies
        recs = screen_drafter_heldout(recs, r/"train"/"drafter", "trend prompts")[0]
    settings = [tuple(s) for s in pipeline_config().evaluate.ngram_settings]
    tgt = load_target(load_drafter(run/"train"/"drafter").config.target)
    model, eos = tgt.load_model("float32", "cpu"), eos_ids(tgt.path, tgt.tokenizer)
    eng = LocalEngine(tgt, max_batch=a.batch_size)
    eng._model = model
    ps = [(r["id"], r["prompt_ids"]) for r in recs]
    d0 = load_drafter(run/"train"/"drafter")
    ttt = (read_json(run/"train"/"drafter"/"config.json").get("eagle3nb_train") or {}).get("ttt_steps") or 3
    base = measure_replay(model, d0, ps, a.max_new_tokens, eos, range(1, 2 * ttt + 1), range(1, 21), a.batch_size,
                          ngram_settings=settings, named=True, engine=eng)
    gname = max((ngram_name(s) for s in settings), key=lambda n: base["best"][n]["tokens_per_forward"])
    out = {"prompts": str(a.prompts or run/"evaluate_prompts.jsonl"), "n_prompts": len(ps),
           "max_new_tokens": a.max_new_tokens, "greedy": base["greedy"], "ngram_setting": gname, "points": []}
    losses = {r: step_losses(r) for r in dict.fromkeys(r for _, r, _ in points)}   # one read a run
    for label, r, ck in points:
        step = ck[0] if ck else read_json(r/"train"/"manifest.json")["counts"]["steps"]
        d = checkpoint_drafter(r/"train"/"drafter", ck[1]) if ck else load_drafter(r/"train"/"drafter")
        k_ttt = (read_json(r/"train"/"drafter"/"config.json").get("eagle3nb_train") or {}).get("ttt_steps") or ttt
        p = score_drafter(model, d, recs, base["runs"], a.max_new_tokens, eos, range(1, 2 * k_ttt + 1),
                          ngram_setting=tuple(map(int, gname[5:].split("-"))), which="heldout")
        ks = p["k"]
        out["points"].append({"label": label, "run": str(r), **checkpoint_facts(r, step, losses[r]), **p})
        print(f"{label:10s} step {step:5d}  eagle3 K={ks['eagle3']} {p['tokens_per_forward']['eagle3']:.3f} "
              f"{p['ci95']['eagle3']}  ngram K={ks['ngram']} {p['tokens_per_forward']['ngram']:.3f}  "
              f"ratio {p['ratio']:.3f} {p['ci95']['ratio']}  {p['verdict']}", flush=True)
    out["seconds"] = round(time.time() - t0, 1)
    if sum(p["label"] == "medium" for p in out["points"]) >= 3: out["reach"] = reach(out)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    plot(out, Path(a.out).with_suffix(".png"))


def plot(out:dict, path:Path):
    "Tokens per target forward with 95% intervals against training tokens and CPU minutes; n-gram's band across."
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pts = out["points"]
    fig, axs = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    g = pts[0]
    for ax, x, name in ((axs[0], "train_tokens", "training tokens (steps × padded batch tokens)"),
                        (axs[1], "cpu_minutes", "training CPU minutes (2 cores)")):
        for group in ([p for p in pts if p["label"] == lab] for lab in dict.fromkeys(p["label"] for p in pts)):
            style = "o-" if len(group) > 1 else "s"
            xs = [p[x] for p in group]
            ys = [p["tokens_per_forward"]["eagle3"] for p in group]
            err = [[y - p["ci95"]["eagle3"][0] for y, p in zip(ys, group)],
                   [p["ci95"]["eagle3"][1] - y for y, p in zip(ys, group)]]
            ax.errorbar(xs, ys, yerr=err, fmt=style, capsize=3,
                        label=f"drafter, {group[0]['label']} run's checkpoints, at its best K, 95% interval")
        lo, hi = g["ci95"]["ngram"]
        ax.axhspan(lo, hi, color="C1", alpha=0.2, label=f"n-gram at its best K (K={g['k']['ngram']}), 95% interval")
        ax.axhline(g["tokens_per_forward"]["ngram"], color="C1", lw=1)
        ax.set_xlabel(name)
        ax.grid(alpha=.3)
    axs[0].set_ylabel("tokens per target forward (pooled)")
    axs[0].legend(fontsize=7)
    fig.suptitle(f"{out['n_prompts']} held-out prompts × ≤ {out['max_new_tokens']} tokens, T=0 replay", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__": main()
