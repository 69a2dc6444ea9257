"End to end through real processes: `eagle3nb serve` on loopback, `eagle3nb generate` against it, kill -9 and resume."
import json, signal, subprocess, time
from pathlib import Path
import httpx, pytest
from conftest import BIN, pause_env, run, wait_paused
from eagle3nb.core import JsonlWriter, read_jsonl, read_manifest
from eagle3nb.serve import start_server_process
from eagle3nb.local import LocalEngine
from eagle3nb.protocol import Sampling
from eagle3nb.prompts import render_prompt

QUESTIONS = ["Hi", "Name three colors.", "What is 2+2?", "Tell me a joke.", "Why is the sky blue?"]

@pytest.fixture(scope="module")
def server():
    proc, url = start_server_process("tiny-qwen3", max_batch=8)
    yield url
    proc.terminate()
    proc.wait(30)

@pytest.fixture(scope="module")
def local():
    return LocalEngine("tiny-qwen3")

def _write_prompts(run_dir, tok, n):
    with JsonlWriter(Path(run_dir)/"prompts/prompts.jsonl") as w:
        for i in range(n):
            q = QUESTIONS[i % len(QUESTIONS)] + (f" ({i})" if i >= len(QUESTIONS) else "")
            w.write({"id": f"q{i}", "prompt_ids": render_prompt(tok, [{"role": "user", "content": q}], thinking=False)})

@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_http_ids_equal_local_greedy(server, local, tmp_path, engine):
    "Through the real CLI and HTTP, SGLang's and vLLM's formats return the local engine's greedy ids token for token."
    _write_prompts(tmp_path, local.target.tokenizer, 5)
    # concurrency 1: each request runs alone in the server, exactly as the reference below
    r = run([str(BIN/"eagle3nb"), "generate", "--run", str(tmp_path), "--engine", engine, "--urls", server,
             "--max_new_tokens", "16", "--concurrency", "1"])
    assert r.returncode == 0, r.stdout + r.stderr
    recs = {o["id"]: o for o in read_jsonl(tmp_path/"generate/generations.jsonl")}
    assert len(recs) == 5
    for p in read_jsonl(tmp_path/"prompts/prompts.jsonl"):
        want = local.generate_batch([p["prompt_ids"]], Sampling(max_new_tokens=16))[0]
        got = recs[p["id"]]
        assert got["prompt_ids"] == p["prompt_ids"]
        assert got["output_ids"] == want.output_ids
        assert got["finish_reason"] == want.finish_reason
        assert got["engine"]["kind"] == engine and got["engine"]["url"] == server
    m = read_manifest(tmp_path/"generate")
    assert m["counts"]["success"] == 5 and m["counts"]["items"] == 5

def test_sglang_wire_shapes(server, local):
    p = render_prompt(local.target.tokenizer, [{"role": "user", "content": "Hi"}], thinking=False)
    sp = Sampling(max_new_tokens=12).to_sglang()
    one = httpx.post(server + "/generate", json={"rid": "a", "input_ids": p, "sampling_params": sp}).json()
    assert set(one) == {"text", "output_ids", "meta_info"} and one["meta_info"]["id"] == "a"
    assert (one["meta_info"]["completion_tokens"] == len(one["output_ids"])
            and one["meta_info"]["prompt_tokens"] == len(p))
    batch = httpx.post(server + "/generate",
                       json={"rid": ["b", "c"], "input_ids": [p, p[:-1]], "sampling_params": sp}).json()
    assert isinstance(batch, list) and [b["meta_info"]["id"] for b in batch] == ["b", "c"]
    # streaming: cumulative server-sent events, finish_reason only on the last, then [DONE]
    with httpx.stream("POST", server + "/generate", json={"input_ids": p, "sampling_params": sp, "stream": True}) as r:
        events = [l[len("data: "):] for l in r.iter_lines() if l.startswith("data: ")]
    assert events[-1] == "[DONE]"
    parts = [json.loads(e) for e in events[:-1]]
    assert parts[-1]["output_ids"] == one["output_ids"] and parts[-1]["meta_info"]["finish_reason"] is not None
    assert all(x["meta_info"]["finish_reason"] is None for x in parts[:-1])
    assert all(parts[i]["output_ids"] == parts[-1]["output_ids"][:len(parts[i]["output_ids"])]
               for i in range(len(parts)))
    # the default max_new_tokens is SGLang's 128 when the field is omitted
    d = httpx.post(server + "/generate", timeout=120,     # 128 tokens: seconds on a loaded 2-core machine
                   json={"input_ids": p, "sampling_params": {"temperature": 0, "ignore_eos": True}}).json()
    assert d["meta_info"]["completion_tokens"] <= 128
    for path in ("/health", "/health_generate"): assert httpx.get(server + path).status_code == 200
    info = httpx.get(server + "/get_server_info").json()
    assert info["context_length"] == 4096 and info["skip_tokenizer_init"] is False and "version" in info
    bad = httpx.post(server + "/generate", json={"input_ids": [10**8], "sampling_params": sp})
    assert bad.status_code == 400 and "outside the vocabulary" in bad.json()["error"]["message"]

def test_vllm_wire_shapes(server, local):
    p = render_prompt(local.target.tokenizer, [{"role": "user", "content": "Hi"}], thinking=False)
    body = {"prompt": [p, p], "max_tokens": 8, "temperature": 1.0, "seed": 3, "n": 2, "return_token_ids": True}
    r = httpx.post(server + "/v1/completions", json=body).json()
    assert [c["index"] for c in r["choices"]] == [0, 1, 2, 3]
    assert all(c["prompt_token_ids"] == p for c in r["choices"])
    assert r["choices"][0]["token_ids"] == r["choices"][2]["token_ids"]          # same prompt, same seed: same sample
    assert r["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in r["choices"])
    no_ids = httpx.post(server + "/v1/completions", json={"prompt": p, "max_tokens": 4}).json()
    assert "token_ids" not in no_ids["choices"][0]
    bad = httpx.post(server + "/v1/completions", json={"prompt": "text prompt", "max_tokens": 4})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == 400
    assert httpx.get(server + "/v1/models").json()["data"][0]["max_model_len"] == 4096

def test_kill_9_and_resume(server, local, tmp_path):
    "A generate process killed by SIGKILL mid-run, then rerun: every prompt ends exactly once, no torn records."
    N = 40
    _write_prompts(tmp_path, local.target.tokenizer, N)
    args = [str(BIN/"eagle3nb"), "generate", "--run", str(tmp_path), "--engine", "sglang", "--urls", server,
            "--max_new_tokens", "24", "--concurrency", "4", "--temperature", "0.7", "--seed", "11"]
    env, marker = pause_env(tmp_path, "record", 6)              # it waits after its sixth record: killed there
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait_paused(p, marker)
    p.send_signal(signal.SIGKILL)
    p.wait()
    out = tmp_path/"generate/generations.jsonl"
    first = out.read_text().count("\n")
    assert first == 6
    with open(out, "ab") as f: f.write(b'{"id": "q39", "prompt_ids": [1, 2')   # what a kill mid-write leaves
    r = run(args)
    assert r.returncode == 0, r.stdout + r.stderr
    ids = [json.loads(l)["id"] for l in out.read_text().splitlines()]
    assert sorted(ids) == sorted(f"q{i}" for i in range(N))                     # each exactly once, torn tail gone
    m = read_manifest(tmp_path/"generate")
    assert (m["counts"]["success"], m["counts"]["failed"], m["counts"]["skipped"], m["counts"]["items"]) == (N, 0, 0, N)
    assert m["counts"]["this_run"]["new_ok"] == N - first
    r = run(args)                                                               # a third run has nothing to do
    assert r.returncode == 0 and out.read_text().count("\n") == N
    assert read_manifest(tmp_path/"generate")["counts"]["this_run"]["new_ok"] == 0
