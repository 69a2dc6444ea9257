"""The whole pipeline from a plain script: the exported package, imported, in a few lines.

    python examples/pipeline.py RUN_DIR [SIZE]

SIZE is a preset of `eagle3nb.settings.SIZES` (default `tiny`: every stage in a couple of minutes on 2 cores).
This one generates in process (no server) and trains online (the target in the loop, no hidden states stored):
the other routes through the same stages.
"""
import sys
from eagle3nb.settings import pipeline_config
from eagle3nb.pipeline import run_pipeline
from eagle3nb.core import read_json

run = sys.argv[1] if len(sys.argv) > 1 else "runs/example"
size = sys.argv[2] if len(sys.argv) > 2 else "tiny"
cfg = pipeline_config(size=size, run=run, generate={"engine": "local"}, train={"source": "online"})
ledger = run_pipeline(cfg)
report = read_json(f"{run}/evaluate/report.json")
for row in report["rows"]:        # the real draft-and-verify loop at the configured K
    print(f"{row['method']:7s} K={row['k']}  tokens per target forward {row['tokens_per_forward']:.3f}")
for method, row in report["best"].items():   # each method at the K chosen on the held-out prompts (replayed exactly)
    print(f"best {method:7s} K={row['k']}  tokens per target forward {row['tokens_per_forward']:.3f}")
if "power" in report: print("verdict:", report["power"]["words"])   # the 95% interval decides, nothing else
print("stages:", ", ".join(f"{s} {v['seconds']:.0f} s" for s, v in ledger.items()))
