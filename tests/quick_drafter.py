("A drafter that really accepts, trained in seconds by eagle3nb's own stages on a target's greedy outputs "
 "(records → capture → train).")
import fcntl, hashlib, json, tempfile
from pathlib import Path
import torch
from eagle3nb.capture import capture
from eagle3nb.core import JsonlWriter
from eagle3nb.core import Run
from eagle3nb.dflash import load_dflash
from eagle3nb.drafter import load_drafter
from eagle3nb.local import LocalEngine
from eagle3nb.protocol import Sampling
from eagle3nb.train import train
from eagle3nb.train_dflash import train_dflash

TEXTS = ["Hello there, how are you", "The capital of France is", "1 2 3 4 5 6", "Once upon a time",
         "Write a poem about the sea", "def main():", "Tell me a joke", "What is 2+2?"]

MEMO = None   # a folder the test session shares (tests/conftest.py sets it): each fit made once a session, then read

def captured_run(target:str, texts=TEXTS, max_new_tokens:int=48, run=None) -> tuple:
    "`(run, engine, prompts, greedy_outputs)`: `texts`' greedy continuations as validated records, captured (float32)."
    eng = LocalEngine(target)
    tok = eng.target.tokenizer
    prompts = [tok.encode(s) for s in texts]
    outs = [g.output_ids for g in eng.generate_batch(prompts, Sampling(max_new_tokens=max_new_tokens))]
    run = Path(run) if run is not None else Path(tempfile.mkdtemp(prefix="quick-drafter-"))
    (run/"validate").mkdir(parents=True)
    with JsonlWriter(run/"validate/records.jsonl") as w:
        for i, (p, o) in enumerate(zip(prompts, outs)): w.write({"id": f"q{i}", "input_ids": p + o,
                                                                 "loss_mask": [0] * len(p) + [1] * len(o)})
    capture(run, target=target, dtype="float32", progress=False)
    return run, eng, prompts, outs

def fit_drafter(target:str, texts=TEXTS, max_new_tokens:int=48, steps:int=80, ttt_steps:int=3, lr:float=3e-3,
                seed:int=0,
                draft_vocab_size:int=1024, **train_kw):
    ("Return `(drafter, engine, prompts, greedy_outputs)`: a drafter trained with TTT on `texts`' greedy "
     "continuations. Under pytest the same arguments fit once a session (`MEMO`): a later call reads that drafter, "
     "with an engine of its own (a fresh model: nothing one test does to it reaches another).")
    def fit(run):
        run, eng, prompts, outs = captured_run(target, texts, max_new_tokens, run)
        train(run, ttt_steps=ttt_steps, max_steps=steps, lr=lr, warmup_steps=5, heldout=0.0, batch_tokens=1 << 16,
              seed=seed, draft_vocab_size=min(draft_vocab_size, eng.vocab_size), log_every=steps, ckpt_every=steps,
              progress=False, **train_kw)
        return eng, prompts, outs
    args = dict(target=target, texts=list(texts), max_new_tokens=max_new_tokens, steps=steps, ttt_steps=ttt_steps,
                lr=lr, seed=seed, draft_vocab_size=draft_vocab_size, **train_kw)
    run, eng, prompts, outs = _memo(args, fit)
    return load_drafter(run/"train/drafter"), eng, prompts, outs

def _memo(args:dict, fit) -> tuple:
    ("`(run, engine, prompts, outputs)`: `fit(run)` into a fresh folder, or, under `MEMO`, into the session's folder "
     "for these `args` once (a lock across xdist workers), read back by every later call.")
    if MEMO is None:
        run = Path(tempfile.mkdtemp(prefix="quick-drafter-"))/"run"
        return (run, *fit(run))
    key = hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()[:16]
    d = Path(MEMO)/key
    d.mkdir(parents=True, exist_ok=True)
    with open(d/"lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)              # another worker fitting the same: wait, then read its drafter
        if (d/"done.json").exists():
            got = json.loads((d/"done.json").read_text())
            return d/"run", LocalEngine(args["target"]), got["prompts"], got["outputs"]
        eng, prompts, outs = fit(d/"run")
        (d/"done.json").write_text(json.dumps({"args": args, "prompts": prompts, "outputs": outs}, default=str))
        return d/"run", eng, prompts, outs

def fit_dflash(target:str, texts=TEXTS, max_new_tokens:int=48, steps:int=60, block_size:int=4, lr:float=3e-3,
               anchors:int=32, seed:int=0, **train_kw):
    ("Return `(drafter, engine, prompts, greedy_outputs)`: a DFlash drafter trained with its block objective on "
     "`texts`' greedy continuations (eagle3nb's stages: records → capture → train_dflash).")
    run, eng, prompts, outs = captured_run(target, texts, max_new_tokens)
    train_dflash(run, block_size=block_size, anchors=anchors, max_steps=steps, lr=lr, warmup_steps=5, heldout=0.0,
                 batch_tokens=1 << 16, seed=seed, log_every=steps, ckpt_every=steps, progress=False, **train_kw)
    return load_dflash(Run(run).dflash_drafter), eng, prompts, outs
