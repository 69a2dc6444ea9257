#!/usr/bin/env python3
"""Convert a training checkpoint that eagle3nb refuses to read into one it reads.

Usage:  python3 scripts/convert_checkpoint.py FILE [FILE ...]

eagle3nb reads checkpoints with `torch.load(weights_only=True)`: tensors and plain values only, so that reading one
never runs code. A checkpoint in torch's legacy (pre-zip) format, or one holding other Python objects, is refused.
This script UNPICKLES each FILE (so it runs whatever the file says: use it only on a checkpoint you made or trust),
turns its settings, vocabulary and data fingerprint into plain JSON values, and writes it back in place (atomically)
in the current format.
"""
import json, os, sys
import torch


def plain(v):
    "JSON-plain values (str for anything else, e.g. paths)."
    return json.loads(json.dumps(v, default=str))


def convert(path: str):
    state = torch.load(path, map_location="cpu", weights_only=False)   # the unpickling this script exists for
    if not isinstance(state, dict) or "model" not in state or "optimizer" not in state:
        raise SystemExit(f"{path}: not an eagle3nb training checkpoint (no model and optimizer state)")
    out = {k: (v if k in ("model", "optimizer") else plain(v)) for k, v in state.items()}
    tmp = path + ".tmp"
    torch.save(out, tmp)
    torch.load(tmp, map_location="cpu", weights_only=True)               # it reads as eagle3nb will read it
    os.replace(tmp, path)
    print(f"{path}: converted")


if __name__ == "__main__":
    if len(sys.argv) < 2: raise SystemExit(__doc__)
    for f in sys.argv[1:]: convert(f)
