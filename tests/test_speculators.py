"""Our speculators export read by the real `speculators` package (0.9.0, its own venv: scripts/setup_speculators.sh).
Tier: `make test-vllm` (sets EAGLE3NB_SPECULATORS_PYTHON)."""
import json, os, subprocess
import pytest
import torch
from eagle3nb.drafter import new_drafter
from eagle3nb.export import export_speculators
from eagle3nb.models import load_target

pytestmark = pytest.mark.speculators

READER = r'''
import json, sys, torch
from safetensors.torch import load_file
from speculators import SpeculatorModel
path, io = sys.argv[1], sys.argv[2]
inp = torch.load(io + "/inputs.pt")
m = SpeculatorModel.from_pretrained(path).eval()
sd, t = m.state_dict(), load_file(path + "/model.safetensors")
logits = []
h = m.lm_head.register_forward_hook(lambda mod, i, o: logits.append(o.detach()))
with torch.no_grad():   # speculators' input_ids are the next tokens (x[i+1] at slot i); positions given as ours
    m(hidden_states=inp["aux"], input_ids=inp["next_ids"], document_ids=torch.zeros_like(inp["next_ids"]),
      position_ids=torch.arange(inp["next_ids"].shape[1])[None], ttt_steps=inp["steps"])
h.remove()
torch.save({"logits": logits}, io + "/outputs.pt")
json.dump({"class": type(m).__name__, "unexpected": sorted(k for k in t if k not in sd), "missing": sorted(k for k in sd if k not in t),
           "not_equal": sorted(k for k in t if k in sd and not torch.equal(sd[k], t[k])),
           "norm_before_residual": m.config.norm_before_residual, "aux_ids": m.config.eagle_aux_hidden_state_layer_ids,
           "norms": [m.config.norm_before_fc, m.config.fc_norm, m.config.norm_output]},
          open(io + "/report.json", "w"))
'''  # noqa: E501

NORMS = ("norm_before_fc", "fc_norm", "norm_output")

@pytest.mark.parametrize("norm_before_residual,norms", [(False, ()), (True, ()), (False, ("fc_norm", "norm_output")),
                                                        (False, ("norm_before_fc", "norm_output"))])
def test_speculators_loads_our_export(tmp_path, norm_before_residual, norms):
    "Plain EAGLE-3 either residual convention, and EAGLE-3.1's norms (speculators' default), read as we wrote them."
    py = os.environ.get("EAGLE3NB_SPECULATORS_PYTHON")
    if not py: pytest.fail("EAGLE3NB_SPECULATORS_PYTHON is not set: run this tier with `make test-vllm` (it "
                           "installs speculators)")
    tgt = load_target("tiny-llama")
    d = new_drafter(tgt, list(range(0, 4000, 2)), [2, 4, 5], norm_before_residual=norm_before_residual,
                    **{n: n in norms for n in NORMS}).eval()
    torch.manual_seed(1)
    for p in d.parameters():
        if p.requires_grad: torch.nn.init.normal_(p, std=0.2)
    out = export_speculators(d, tmp_path/"export")
    T, steps = 128, 3   # 128: one block of speculators' default flex-attention mask
    x, aux = torch.randint(0, 4000, (1, T)), torch.randn(1, T, 3 * d.config.target_hidden_size)
    with torch.no_grad(): ref = [d.logits(s) for s in d.ttt_forward(x, aux, [T], steps)]
    next_ids = torch.cat([x[:, 1:], x.new_zeros(1, 1)], 1)
    torch.save({"aux": aux, "next_ids": next_ids, "steps": steps}, tmp_path/"inputs.pt")
    (tmp_path/"reader.py").write_text(READER)
    r = subprocess.run([py, str(tmp_path/"reader.py"), str(out), str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads((tmp_path/"report.json").read_text())
    assert rep["class"] == "Eagle3DraftModel"
    assert rep["unexpected"] == [], rep                                          # every tensor we wrote has a home
    # only the verifier's own, loaded from the verifier when training
    assert rep["missing"] == ["verifier_lm_head.weight", "verifier_norm.weight"], rep
    assert rep["not_equal"] == [], rep                                           # bit-equal, embed_tokens included
    assert rep["norm_before_residual"] is norm_before_residual and rep["aux_ids"] == [2, 4, 5]
    assert rep["norms"] == [n in norms for n in NORMS], rep
    got = torch.load(tmp_path/"outputs.pt")["logits"]
    assert len(got) == steps
    for k, (a, b) in enumerate(zip(ref, got)): torch.testing.assert_close(b, a, atol=1e-5, rtol=0, msg=f"TTT step {k}")
