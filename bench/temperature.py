"""Where the verdict turns: a finished run's drafter beside n-gram at several sampling temperatures, with intervals.

    .venv/bin/python bench/temperature.py --run runs/default --temps 0 0.2 0.6 1.0 --out nbs/results/temperature.json

The evaluation's own steps (`eagle3nb.evaluate`), with the run's `[evaluate]` settings: the run's held-out and sealed
prompts drawn and screened once, the target and drafter loaded once, then for each temperature one answer a prompt
(greedy at 0; else drawn with the prompt's own seed from temperature T and the served sampling's top-p and top-k,
`served_sampling`), every K of each method replayed over it, n-gram's setting and each method's K chosen on the
held-out prompts, the sealed prompts at that K, a paired bootstrap over conversations for the 95 % intervals and the
verdict (`evaluate.measure_sets`). Writes OUT (JSON) and OUT with .png: each method's tokens per target forward and
their ratio against temperature (`nbs/explanations/served_temperature.ipynb`)."""
import argparse, json, time
from pathlib import Path


def plot(rows:list, path:Path, title:str):
    "Tokens per target forward of each method (held-out, with intervals) and their ratio, against temperature."
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    T = [r["temperature"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for m, c in (("eagle3", "tab:blue"), ("ngram", "tab:orange")):
        y = [r["heldout"]["tokens_per_forward"][m] for r in rows]
        lo = [y_ - r["heldout"]["ci95"][m][0] for y_, r in zip(y, rows)]
        hi = [r["heldout"]["ci95"][m][1] - y_ for y_, r in zip(y, rows)]
        a.errorbar(T, y, yerr=[lo, hi], marker="o", capsize=3, color=c, label=m)
    a.set(xlabel="temperature", ylabel="tokens per target forward (held-out, 95% CI)")
    a.legend()
    y = [r["heldout"]["ratio"] for r in rows]
    lo = [y_ - r["heldout"]["ci95"]["ratio"][0] for y_, r in zip(y, rows)]
    hi = [r["heldout"]["ci95"]["ratio"][1] - y_ for y_, r in zip(y, rows)]
    b.errorbar(T, y, yerr=[lo, hi], marker="o", capsize=3, color="k")
    b.axhline(1, color="grey", lw=0.8, ls="--")
    b.set(xlabel="temperature", ylabel="eagle3 ÷ ngram (95% CI)")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default="runs/default", help="a finished main job (its drafter, prompts and settings)")
    ap.add_argument("--temps", type=float, nargs="+", default=[0.0, 0.2, 0.6, 1.0])
    ap.add_argument("--out", default="runs/temperature.json")
    a = ap.parse_args()
    from eagle3nb.core import Run, read_json
    from eagle3nb.evaluate import EvaluateConfig, draw_and_screen, eval_setup, measure_sets, open_models
    from eagle3nb.models import served_sampling
    run, t0 = Run(a.run), time.time()
    cfg = EvaluateConfig(**read_json(run.settings)["evaluate"])
    es = eval_setup(run, cfg)
    served = served_sampling(es.tgt.path) or {"top_p": 1.0, "top_k": -1, "source": "none: temperature alone"}
    recs, srecs, near, _ = draw_and_screen(es, run.heldout_prompts, run.sealed_prompts)
    open_models(es)
    rows = []
    for T in a.temps:
        t1 = time.time()
        s = None if T == 0 else {"temperature": T, "top_p": served["top_p"], "top_k": served["top_k"],
                                 "source": f"temperature {T}; top-p and top-k of {served['source']}"}
        m = measure_sets(es, recs, srecs, s)
        keep = ("n_prompts", "k", "tokens_per_forward", "ci95", "ratio", "verdict", "words")
        rows.append({"temperature": T, "sampling": s, "heldout": {k: m["power"][k] for k in keep},
                     "sealed": {k: m["sealed"]["power"][k] for k in keep} if m.get("sealed") else None,
                     "ngram_setting": m["ngram_chosen"], "seconds": round(time.time() - t1, 1)})
        h = rows[-1]["heldout"]
        print(f"T={T}: eagle3 K={h['k']['eagle3']} {h['tokens_per_forward']['eagle3']:.3f}, ngram "
              f"K={h['k']['ngram']} {h['tokens_per_forward']['ngram']:.3f}, ratio {h['ratio']:.3f} "
              f"[{h['ci95']['ratio'][0]:.3f}–{h['ci95']['ratio'][1]:.3f}]: {h['verdict']}", flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    res = {"run": str(run), "target": es.tgt.path.name, "served": served, "max_new_tokens": cfg.max_new_tokens,
           "near_duplicates": near, "rows": rows, "seconds": round(time.time() - t0, 1),
           "command": "bench/temperature.py --run " + str(run) + " --temps " + " ".join(map(str, a.temps))}
    out.write_text(json.dumps(res, indent=1) + "\n")
    plot(rows, out.with_suffix(".png"), f"{es.tgt.path.name} drafter vs n-gram, {len(recs)} held-out prompts × ≤ "
         f"{cfg.max_new_tokens} tokens; top-p {served['top_p']}, top-k {served['top_k']} at T > 0")
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
