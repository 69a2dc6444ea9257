"""Run by speculators' own venv (never by pytest): load an eagle3nb speculators export with `SpeculatorModel`, run its
training-time test on the inputs a test saved, and report what it read. Shared by the tiny-shape interop test
(`tests/test_speculators.py`) and the true-shape one (`tests/test_real_shapes_export.py`).

    python speculators_reader.py EXPORT_DIR IO_DIR THREADS ATTN   # ATTN: "default" (speculators' own) or "sdpa"

IO_DIR/inputs.pt holds `aux`, `next_ids` and `steps`; the reader writes IO_DIR/outputs.pt (the `lm_head` logits of
every step) and IO_DIR/report.json."""
import json, resource, sys, time
import torch
from safetensors import safe_open
from speculators import SpeculatorModel, SpeculatorModelConfig

path, io, threads, attn = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(threads)
inp = torch.load(io + "/inputs.pt")
t0 = time.perf_counter()
cfg = SpeculatorModelConfig.from_pretrained(path)
if attn != "default": cfg.transformer_layer_config._attn_implementation = attn   # "sdpa": as eagle3nb's drafter runs
m = SpeculatorModel.from_pretrained(path, config=cfg).eval()
load_s = time.perf_counter() - t0
sd, not_equal = m.state_dict(), []
with safe_open(path + "/model.safetensors", "pt") as f:   # one tensor at a time: never a second copy of the model
    names = list(f.keys())
    for k in names:
        if k in sd and not torch.equal(sd[k], f.get_tensor(k)): not_equal.append(k)
logits = []
h = m.lm_head.register_forward_hook(lambda mod, i, o: logits.append(o.detach()))
with torch.no_grad():   # speculators' input_ids are the next tokens (x[i+1] at slot i); positions given as ours
    m(hidden_states=inp["aux"], input_ids=inp["next_ids"], document_ids=torch.zeros_like(inp["next_ids"]),
      position_ids=torch.arange(inp["next_ids"].shape[1])[None], ttt_steps=inp["steps"])
h.remove()
torch.save({"logits": logits}, io + "/outputs.pt")
c = m.config
json.dump({"class": type(m).__name__, "attn": m._attn_impl, "dtype": str(next(m.parameters()).dtype),
           "unexpected": sorted(k for k in names if k not in sd), "missing": sorted(k for k in sd if k not in names),
           "not_equal": not_equal, "aux_ids": c.eagle_aux_hidden_state_layer_ids,
           "norm_before_residual": c.norm_before_residual, "norms": [c.norm_before_fc, c.fc_norm, c.norm_output],
           "load_s": load_s, "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20},
          open(io + "/report.json", "w"))
