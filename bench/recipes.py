"""Training recipes, each change measured alone: train a drafter on a finished run's captured states with the main
job's training settings plus one change, then replay it on *tuning prompts* (held-out-side conversations the main
job's evaluation and sealed sets never use) at every K beside n-gram. Tokens per target forward at each method's best
K is the figure; nothing here is timed (the machine may be busy).

    .venv/bin/python bench/recipes.py --base runs/medium --out runs/recipes baseline ttt5 vocab8k
    .venv/bin/python bench/recipes.py --base runs/medium --out runs/recipes --context 100 data
    .venv/bin/python bench/recipes.py --base runs/base --out runs/recipes --round_base norms31 baseline ttt5
    .venv/bin/python bench/recipes.py --from_run runs/default --base runs/base   # a base with tuning prompts

A variant is `name` from VARIANTS (training overrides). `--context N` trains the variants on the generated records and
the first N context records of the base capture (a subset index over the same shards), `--no_generated` leaves the
generated ones out; the default always trains on all of the base's data, so `--context N data` (the default's
settings on that data) measures a data mix as one more change. Results append to OUT/results.jsonl.
The tuning prompts are the base run's `tuning_prompts.jsonl` (`[evaluate] tuning_n_prompts`, 64 in the main job):
far-end held-out-side conversations just before the sealed ones, apart from the evaluation set, the sealed set and
anything trained on (tested), and never measured by the main job. `--from_run RUN` makes such a base for a main job
that finished before tuning sets existed: links to RUN's stages, and the tuning set drawn by the package's own
`sealed_file` (which must redraw RUN's sealed set exactly, or nothing is written).

Each variant is compared with the round's default (`baseline`: the size's settings plus `--round_base` changes, plus
`--set`, on all of the base's data): per-prompt records (`per_prompt_records`, every K of both) on the same tuning
prompts and the same greedy answers, each drafter at its own best K (`choose_k`), and the ratio variant ÷ default
with a 95 % paired bootstrap over conversations (`power_block`, the evaluation's machinery). Decision: "adopt" only
when the interval's lower end is above 1, "worse" when its upper end is below 1, else "keep default". The K is
chosen on the very prompts the ratio is measured on: fine for choosing a recipe, never for a figure reported as the
drafter's (the evaluation chooses K on held-out prompts and reads the sealed ones at it). One training seed per
variant: the interval is over prompts only. The default's records are stored under OUT/baselines/, keyed by its
exact training settings, base capture, tuning prompts, answer length and Ks, so a later invocation compares against
them without retraining, and a changed setting never compares against a stale default (it trains the default again
first). `bench/seeds.py` decides the same rows over training seeds (and at the served sampling)."""
import argparse, hashlib, json, os, shlex, shutil, sys, time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

VARIANTS = {
    "baseline": {},
    "data": {},   # the default's settings on the data --context / --no_generated select
    "ttt5": {"ttt_steps": 5},
    "ttt7": {"ttt_steps": 7},
    "vocab2k": {"draft_vocab_size": 2048},
    "vocab8k": {"draft_vocab_size": 8192},
    "vocab16k": {"draft_vocab_size": 16384},
    "lr1e-3": {"lr": 1e-3},
    "lr_linear": {"lr_schedule": "linear"},
    "lr_constant": {"lr_schedule": "constant"},
    "lr4e-3": {"lr": 4e-3},
    "epochs1": {"epochs": 1},
    "epochs2": {"epochs": 2},
    "epochs4": {"epochs": 4},
    "epochs6": {"epochs": 6},
    "init_layer": {"init_layer": "target"},
    "norms31": {"norm_before_fc": True, "norm_output": True},   # speculators' default for eagle3
    "fc_norm31": {"fc_norm": True, "norm_output": True},
    "norms-off": {"norm_before_fc": False, "norm_output": False},   # EAGLE-3.1's norms left out (seeds.py)
    "labels_only": {"loss_positions": "labels"},
}
EAGLE_KS, NGRAM_KS = range(1, 11), range(1, 11)   # the evaluation's: the drafter past its training K, n-gram to 10


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
                         "--stages evaluate`) with [evaluate] tuning_n_prompts > 0, or make a base with "
                         "`bench/recipes.py --from_run RUN --base NEW`")
    return [o for _, o in JsonlReader(p)]


@contextmanager
def in_main_job_root(run:Path):
    "Work in the folder the main job of `run`'s capture ran in: its manifests name records relative to it."
    src, here = (run/"capture").resolve().parent, Path.cwd()
    run_field = json.loads((src/"pipeline_config.json").read_text())["run"]
    rel = not Path(run_field).is_absolute() and str(src).endswith(run_field.rstrip("/"))   # absolute: names are too
    os.chdir(str(src)[:-len(run_field)] if rel else here)
    try: yield
    finally: os.chdir(here)


def make_base(src:Path, dst:Path, c) -> dict:
    "DST: links to finished run SRC's stages, and the tuning set `sealed_file` draws (it must redraw SRC's sealed set)."
    from eagle3nb.core import InputError, JsonlReader, write_json
    from eagle3nb.heldout import check_heldout, trained_on
    from eagle3nb.pipeline import sealed_file
    dst.mkdir(parents=True, exist_ok=True)
    for d in ("prompts", "generate", "validate", "context", "capture", "train", "capture_records.jsonl"):
        if (src/d).exists() and not (dst/d).exists(): (dst/d).symlink_to((src/d).resolve())
    for f in ("evaluate_prompts.jsonl", "generate_prompts.jsonl", "pipeline_config.json"): shutil.copy(src/f, dst/f)
    read = lambda p: [o for _, o in JsonlReader(p)]
    sealed_file(dst, c, held=dst/"evaluate_prompts.jsonl")
    new, old = read(dst/"sealed_prompts.jsonl"), read(src/"sealed_prompts.jsonl")
    if [(p["id"], p["prompt_ids"]) for p in new] != [(p["id"], p["prompt_ids"]) for p in old]:
        (dst/"tuning_prompts.jsonl").unlink(missing_ok=True)
        raise InputError(f"{dst/'sealed_prompts.jsonl'}: the sealed set drawn now is not {src/'sealed_prompts.jsonl'}; "
                         "the tuning set would not be the one the main job draws (data or settings differ)")
    tune = read(dst/"tuning_prompts.jsonl")
    convs = lambda ps: {p["conversation"] for p in ps}
    for other, ps in (("evaluation", read(dst/"evaluate_prompts.jsonl")), ("sealed", old)):
        if both := convs(tune) & convs(ps):
            raise InputError(f"{dst/'tuning_prompts.jsonl'}: {len(both)} conversations also in the {other} set")
    with in_main_job_root(src): trained = trained_on(src.resolve()/"train")
    check_heldout(tune, trained, "tuning prompts")
    info = {"from_run": str(src), "tuning_prompts": len(tune), "sealed_redrawn": len(new),
            "checked": f"no conversation shared with the {len(read(dst/'evaluate_prompts.jsonl'))} evaluation "
                       f"prompts, the {len(old)} sealed ones, or the {len(trained.records)} records of "
                       f"{trained.source}; the sealed set redrawn equals {src/'sealed_prompts.jsonl'}"}
    write_json(dst/"base.json", info)
    return info


def trained_as(run:Path, settings:dict) -> bool:
    "Whether RUN/train holds a finished drafter trained with exactly `settings` (`--reuse_trained`)."
    from eagle3nb.core import read_manifest
    if not (run/"train"/"drafter").exists() or not (run/"train"/"manifest.json").exists(): return False
    cfg = read_manifest(run/"train")["config"]
    return all(cfg.get(k) == v for k, v in settings.items() if k in cfg and k not in ("keep_checkpoints", "urls"))


def digest(x) -> str:
    return hashlib.sha256(json.dumps(x, sort_keys=True, default=str).encode()).hexdigest()[:16]


def file_digest(p:Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()[:16]


def baseline_key(settings:dict, base:Path, n_context, generated:bool, max_new_tokens:int) -> tuple:
    "`(key, fields)`: what the stored default's records depend on: its training settings, data, prompts and Ks."
    fields = {"train": settings, "capture": str((base/"capture").resolve()),
              "capture_index": file_digest(base/"capture"/"index.jsonl"), "context": n_context,
              "generated": generated, "tuning": file_digest(base/"tuning_prompts.jsonl"),
              "max_new_tokens": max_new_tokens, "eagle_ks": list(EAGLE_KS), "ngram_ks": list(NGRAM_KS)}
    return digest(fields), fields


def compare(recs:list, base_recs:list, max_new_tokens:int) -> dict:
    "The variant's best K over the default's, each at its own `choose_k`, with `power_block`'s paired bootstrap."
    from eagle3nb.core import InputError
    from eagle3nb.power import choose_k, power_block
    if [(r["id"], r["output_tokens"]) for r in recs] != [(r["id"], r["output_tokens"]) for r in base_recs]:
        raise InputError("the variant's and the default's records are not the same prompts and answers: "
                         "measure both with the same --out, --max_new_tokens and base")
    both = [{**r, "by_k": {"variant": r["by_k"]["eagle3"], "default": b["by_k"]["eagle3"]}}
            for r, b in zip(recs, base_recs)]
    ks = {"variant": choose_k(both, "variant"), "default": choose_k(both, "default")}
    p = power_block(both, ks, max_new_tokens, a="variant", b="default")
    lo, hi = p["ci95"]["ratio"]
    return {"ratio": p["ratio"], "ci95": [lo, hi], "decision": "adopt" if lo > 1 else "worse" if hi < 1 else
            "keep default", "default_best_k": ks["default"], "default_tok_fwd": p["tokens_per_forward"]["default"],
            "bootstrap": {"resamples": p["resamples"], "seed": p["seed"], "words": p["words"]}}


def command(a, name:str) -> str:
    "The invocation that makes one row."
    flags = [f"--base {a.base}", f"--out {a.out}", f"--size {a.size}", f"--max_new_tokens {a.max_new_tokens}"]
    if name != "baseline":   # the default always trains on all of the base's data
        flags += [f"--context {a.context}"] * (a.context is not None) + ["--no_generated"] * a.no_generated
    flags += ["--reuse_trained"] * a.reuse_trained + [f"--round_base {a.round_base}"] * bool(a.round_base)
    flags += [f"--set {shlex.quote(s)}" for s in a.set]
    return "python bench/recipes.py " + " ".join(flags + [name])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="*")
    ap.add_argument("--base", default="runs/medium")
    ap.add_argument("--out", default="runs/recipes")
    ap.add_argument("--size", default="small", help="the SIZES preset whose training settings are the baseline")
    ap.add_argument("--context", type=int, default=None, help="context records the variants train on "
                    "(default: all captured; the default always trains on all)")
    ap.add_argument("--no_generated", action="store_true", help="leave the generated records out (context only)")
    ap.add_argument("--set", action="append", default=[], help="extra training override key=value (JSON value)")
    ap.add_argument("--round_base", default="", help="VARIANTS adopted in earlier rounds (comma-separated): "
                    "this round's default is the size's settings plus theirs")
    ap.add_argument("--from_run", default=None, help="make --base from this finished run (links and a tuning set)")
    ap.add_argument("--max_new_tokens", type=int, default=96)
    ap.add_argument("--reuse_trained", action="store_true", help="skip training where OUT/variant holds a drafter "
                    "trained with exactly its settings")
    a = ap.parse_args()
    import torch
    from eagle3nb.settings import pipeline_config
    base, out = Path(a.base), Path(a.out)
    c = pipeline_config(size=a.size)
    if a.from_run: print(json.dumps(make_base(Path(a.from_run), base, c), indent=1), flush=True)
    if not a.variants: return
    from eagle3nb.core import read_manifest
    from eagle3nb.train import train
    from eagle3nb.drafter import load_drafter
    from eagle3nb.heldout import check_drafter_heldout
    from eagle3nb.models import eos_ids, load_target
    from eagle3nb.power import choose_k, tokens_per_forward
    from eagle3nb.replay import measure_replay, per_prompt_records
    out.mkdir(parents=True, exist_ok=True)
    extra = {k: json.loads(v) for k, v in (s.split("=", 1) for s in a.set)}
    rounds = [n for n in a.round_base.split(",") if n]
    round_over = {k: v for n in rounds for k, v in VARIANTS[n].items()}
    tune = tuning_set(base, c)
    tgt = load_target(c.target)
    model, eos = tgt.load_model("float32", "cpu"), eos_ids(tgt.path, tgt.tokenizer)
    ps = [(p["id"], p["prompt_ids"]) for p in tune]
    cache = out/f"tuning_outputs_{a.max_new_tokens}.json"
    outputs = json.loads(cache.read_text()) if cache.exists() else None
    default_over = {**round_over, **extra}
    key, fields = baseline_key({**asdict(c.train), **default_over}, base, None, True, a.max_new_tokens)   # all data
    stored = out/"baselines"/f"{key}.json"
    names = list(a.variants)
    if not stored.exists() and "baseline" not in names:
        print(f"no stored default for these settings ({stored}): training it first", flush=True)
        names.insert(0, "baseline")
    names.sort(key=lambda n: n != "baseline")   # the default first: every other row compares with it
    for name in names:
        over = {**round_over, **VARIANTS[name], **extra}
        tag = name + "".join(f"-{k}{v}" for k, v in extra.items()) + "".join(f"@{n}" for n in rounds)
        ctx, gen = (None, True) if name == "baseline" else (a.context, not a.no_generated)
        run = variant_run(base, out, tag, ctx, gen)
        settings, t0 = {**asdict(c.train), **over}, time.time()
        if a.reuse_trained and trained_as(run, settings):
            m = read_manifest(run/"train")
            secs = m["timings"]["seconds"]
        else:
            m = train(run, aux_layers=c.capture.aux_layers, fresh=True, progress=False, **settings)
            secs = time.time() - t0
        d = load_drafter(run/"train"/"drafter")
        drafter_dir = run.resolve()/"train"/"drafter"
        with in_main_job_root(base): checked = check_drafter_heldout(tune, drafter_dir, "tuning prompts")
        res = measure_replay(model, d, ps, a.max_new_tokens, eos, EAGLE_KS, NGRAM_KS, outputs=outputs)
        if outputs is None:
            outputs = [res["outputs"][i] for i, _ in ps]
            cache.write_text(json.dumps(outputs))
        recs = per_prompt_records(res["per_prompt"], tune, "tuning", {"eagle3": "eagle3", "ngram": "ngram2-4"})
        (run/"per_prompt.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        ke, kg = choose_k(recs, "eagle3"), choose_k(recs, "ngram")
        if name == "baseline":
            stored.parent.mkdir(parents=True, exist_ok=True)
            stored.write_text(json.dumps({"key": key, "fields": fields, "run": str(run), "records": recs}))
            cmp = {"ratio": 1.0, "ci95": [1.0, 1.0], "decision": "default", "default_best_k": ke,
                   "default_tok_fwd": round(tokens_per_forward(recs, "eagle3", ke), 4)}
        else: cmp = compare(recs, json.loads(stored.read_text())["records"], a.max_new_tokens)
        row = {"variant": name, "overrides": over, "round_base": rounds, "default_overrides": default_over,
               "baseline_key": key, "context": ctx, "generated": gen,
               "base": str(base), "train_tokens": sum(items_len(run)),
               "train_steps": m["counts"]["steps"], "train_records": m["counts"]["train_records"],
               "train_seconds": round(secs, 1), "threads": torch.get_num_threads(),
               "tuning_prompts": len(ps), "max_new_tokens": a.max_new_tokens, "heldout_check": checked,
               "eagle3_best_k": ke, "eagle3_tok_fwd": round(tokens_per_forward(recs, "eagle3", ke), 4),
               "eagle3_tau": res["by_k"]["eagle3"][ke - 1]["tau"],
               "eagle3_by_k": [r["tokens_per_forward"] for r in res["by_k"]["eagle3"]],
               "eagle3_per_position": res["by_k"]["eagle3"][ke - 1]["per_position"],
               "ngram_best_k": kg, "ngram_tok_fwd": round(tokens_per_forward(recs, "ngram", kg), 4),
               **cmp, "per_prompt": str(run/"per_prompt.jsonl"), "command": command(a, name),
               "train_heldout": (m.get("final") or {}).get("heldout")}
        with open(out/"results.jsonl", "a") as f: f.write(json.dumps(row) + "\n")
        print(f"{name:12s} {over}: eagle3 best K={ke} {row['eagle3_tok_fwd']:.3f} tok/fwd, ngram K={kg} "
              f"{row['ngram_tok_fwd']:.3f}; ÷ default {cmp['ratio']:.3f} [{cmp['ci95'][0]:.3f}–{cmp['ci95'][1]:.3f}] "
              f"{cmp['decision']}; train {secs:.0f} s, {row['train_steps']} steps", flush=True)


if __name__ == "__main__":
    sys.exit(main())
