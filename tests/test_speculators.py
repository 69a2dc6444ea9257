"""Our speculators export read by the real `speculators` package (0.9.0, its own venv: scripts/setup_speculators.sh).
Tier: `make test-vllm` (sets EAGLE3NB_SPECULATORS_PYTHON)."""
import json, os, subprocess
from pathlib import Path
import pytest
import torch
from eagle3nb.drafter import new_drafter
from eagle3nb.export import export_speculators
from eagle3nb.models import load_target

pytestmark = pytest.mark.speculators

READER = Path(__file__).parent/"speculators_reader.py"   # run by speculators' venv

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
    r = subprocess.run([py, str(READER), str(out), str(tmp_path), str(torch.get_num_threads()), "default"],
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
