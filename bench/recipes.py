"""Training recipes, each change measured alone: train a drafter on a finished run's captured states with the main
job's training settings plus one change, then replay it on *tuning prompts* (held-out-side conversations the main
job's evaluation and sealed sets never use) at every K beside n-gram. Tokens per target forward at each method's best
K is the figure; nothing here is timed (the machine may be busy).

    .venv/bin/python bench/recipes.py --base runs/medium --out runs/recipes baseline ttt5 vocab8k
    .venv/bin/python bench/recipes.py --base runs/medium --out runs/recipes --context 100 baseline

A variant is `name` from VARIANTS (training overrides). `--context N` trains on the generated records and the first N
context records of the base capture (a subset index over the same shards). Results append to OUT/results.jsonl.
The tuning prompts are the base run's `tuning_prompts.jsonl` (`[evaluate] tuning_n_prompts`, 64 in the main job):
far-end held-out-side conversations just before the sealed ones, apart from the evaluation set, the sealed set and
anything trained on (tested), and never measured by the main job."""
import argparse, json, os, shutil, sys, time
from dataclasses import asdict
from pathlib import Path

VARIANTS = {
    "baseline": {},
    "ttt5": {"ttt_steps": 5},
    "ttt7": {"ttt_steps": 7},
    "vocab2k": {"draft_vocab_size": 2048},
    "vocab8k": {"draft_vocab_size": 8192},
    "vocab16k": {"draft_vocab_size": 16384},
    "lr1e-3": {"lr": 1e-3},
    "lr_linear": {"lr_schedule": "linear"},
    "lr_constant": {"lr_schedule": "constant"},
    "lr4e-3": {"lr": 4e-3},
    "epochs2": {"epochs": 2},
    "epochs6": {"epochs": 6},
    "init_layer": {"init_layer": "target"},
    "norms31": {"norm_before_fc": True, "norm_output": True},   # speculators' default for eagle3
    "fc_norm31": {"fc_norm": True, "norm_output": True},
    "labels_only": {"loss_positions": "labels"},
}


def subset_capture(base:Path, run:Path, n_context:int|None, generated:bool=True):
    "RUN/capture: the base capture, or a subset: generated records (or none), the first `n_context` context ones."
    cap = run/"capture"
    if cap.exists() or cap.is_symlink(): shutil.rmtree(cap) if not cap.is_symlink() else cap.unlink()
    if n_context is None and generated:
        cap.symlink_to((base/"capture").resolve())
        return
    cap.mkdir()
    for f in ("config.json", "manifest.json"): shutil.copy(base/"capture"/f, cap/f)
    (cap/"shards").symlink_to((base/"capture"/"shards").resolve())
    rows, n = [], 0
    for line in open(base/"capture"/"index.jsonl"):
        o = json.loads(line)
        if o["id"].startswith("context-"):
            if n_context is not None and n >= n_context: continue
            n += 1
        elif not generated: continue
        rows.append(line)
    (cap/"index.jsonl").write_text("".join(rows))


def variant_run(base:Path, out:Path, name:str, n_context:int|None, generated:bool=True) -> Path:
    "A run directory whose prompts, generations and records are the base run's (links), and a capture (sub)set."
    run = out/(name + ("" if n_context is None else f"-ctx{n_context}") + ("" if generated else "-nogen"))
    run.mkdir(parents=True, exist_ok=True)
    for d in ("prompts", "generate", "validate", "context"):
        if (base/d).exists() and not (run/d).exists(): (run/d).symlink_to((base/d).resolve())
    for f in ("capture_records.jsonl",):
        if (base/f).exists() and not (run/f).exists(): (run/f).symlink_to((base/f).resolve())
    subset_capture(base, run, n_context, generated)
    return run


def items_len(run:Path) -> list:
    return [json.loads(x)["length"] for x in open(run/"capture"/"index.jsonl")]


def tuning_set(base:Path, c) -> list:
    "The base run's `tuning_prompts.jsonl`: the prompts recipes are chosen on, which the main job never measures."
    from eagle3nb.core import InputError, JsonlReader
    p = base/"tuning_prompts.jsonl"
    if not p.exists():
        raise InputError(f"{p}: no tuning prompts; rerun the base's evaluate stage (`eagle3nb run --run {base} "
                         "--stages evaluate`) with [evaluate] tuning_n_prompts > 0")
    return [o for _, o in JsonlReader(p)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--base", default="runs/medium")
    ap.add_argument("--out", default="runs/recipes")
    ap.add_argument("--size", default="small", help="the SIZES preset whose training settings are the baseline")
    ap.add_argument("--context", type=int, default=None, help="context records to train on (default: all captured)")
    ap.add_argument("--no_generated", action="store_true", help="leave the generated records out (context only)")
    ap.add_argument("--set", action="append", default=[], help="extra training override key=value (JSON value)")
    ap.add_argument("--max_new_tokens", type=int, default=96)
    a = ap.parse_args()
    import torch
    from eagle3nb.settings import pipeline_config
    from eagle3nb.train import train
    from eagle3nb.drafter import load_drafter
    from eagle3nb.heldout import check_drafter_heldout
    from eagle3nb.models import eos_ids, load_target
    from eagle3nb.replay import measure_replay
    base, out = Path(a.base), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    c = pipeline_config(size=a.size)
    extra = {k: json.loads(v) for k, v in (s.split("=", 1) for s in a.set)}
    tune = tuning_set(base, c)
    tgt = load_target(c.target)
    model, eos = tgt.load_model("float32", "cpu"), eos_ids(tgt.path, tgt.tokenizer)
    ps = [(p["id"], p["prompt_ids"]) for p in tune]
    cache = out/f"tuning_outputs_{a.max_new_tokens}.json"
    outputs = json.loads(cache.read_text()) if cache.exists() else None
    for name in a.variants:
        over = {**VARIANTS[name], **extra}
        run = variant_run(base, out, name + "".join(f"-{k}{v}" for k, v in extra.items()), a.context,
                          not a.no_generated)
        t0 = time.time()
        m = train(run, aux_layers=c.capture.aux_layers, fresh=True, progress=False, **{**asdict(c.train), **over})
        secs = time.time() - t0
        d = load_drafter(run/"train"/"drafter")
        checked = check_drafter_heldout(tune, run/"train"/"drafter", "tuning prompts")
        ttt = max(over.get("ttt_steps", c.train.ttt_steps), 1)
        res = measure_replay(model, d, ps, a.max_new_tokens, eos, range(1, ttt + 1), outputs=outputs)
        if outputs is None:
            outputs = [res["outputs"][i] for i, _ in ps]
            cache.write_text(json.dumps(outputs))
        e, g = res["best"]["eagle3"], res["best"]["ngram"]
        row = {"variant": name, "overrides": over, "context": a.context, "generated": not a.no_generated,
               "base": str(base), "train_tokens": sum(items_len(run)),
               "train_steps": m["counts"]["steps"], "train_records": m["counts"]["train_records"],
               "train_seconds": round(secs, 1), "threads": torch.get_num_threads(),
               "tuning_prompts": len(ps), "max_new_tokens": a.max_new_tokens, "heldout_check": checked,
               "eagle3_best_k": e["k"], "eagle3_tok_fwd": e["tokens_per_forward"], "eagle3_tau": e["tau"],
               "eagle3_by_k": [r["tokens_per_forward"] for r in res["by_k"]["eagle3"]],
               "eagle3_per_position": res["by_k"]["eagle3"][-1]["per_position"],
               "ngram_best_k": g["k"], "ngram_tok_fwd": g["tokens_per_forward"],
               "train_heldout": (m.get("final") or {}).get("heldout")}
        with open(out/"results.jsonl", "a") as f: f.write(json.dumps(row) + "\n")
        print(f"{name:12s} ctx={a.context} {over}: eagle3 best K={e['k']} {e['tokens_per_forward']:.3f} tok/fwd "
              f"(by K {[round(x, 3) for x in row['eagle3_by_k']]}), ngram K={g['k']} {g['tokens_per_forward']:.3f}; "
              f"train {secs:.0f} s, {row['train_steps']} steps", flush=True)


if __name__ == "__main__":
    sys.exit(main())
