"""The SGLang client against a fault-injecting loopback server: every retry, every failure reason, every count, exactly.

`fault_server.FaultServer` answers each `/generate` by the behaviour named in its rid (`e500x2-0` -> `e500x2`).
The client runs with a 1 s timeout, 3 retries and millisecond backoff, so the whole file takes a few seconds.
The server behaves as SGLang does where it matters here: duplicate in-flight rids are refused, the context length is
reported on `/v1/models` only, and prompt + max_new_tokens is checked against it.
"""
import asyncio, json, time
import pytest
from fault_server import FaultServer, BEHAVIOURS, LONG_PROMPT_MSG, OK_IDS, EOS
from eagle3nb.core import JsonlWriter, read_jsonl
from eagle3nb.engines import SGLangEngine
from eagle3nb.protocol import Generation, PermanentError, Sampling, TransientError
from eagle3nb.generate import generate_async

MAX_RETRIES = 3
PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 9]
CTX = 64                                  # the server's context_length: a longer prompt is skipped
LONG = list(range(1, 101))                # 100 tokens > CTX - 1

# behaviour -> (succeeds, attempts on the first run, hits per rid after the first run)
EXPECT = {"ok": (True, 1, 1), "e500x2": (True, 3, 3), "e429x1": (True, 2, 2), "reset1": (True, 2, 2),
          "hang1": (True, 2, 2), "leak": (True, 1, 1), "eosatlen": (True, 1, 1),
          "e503always": (False, None, MAX_RETRIES + 1), "badjson": (False, None, 1), "abort": (False, None, 1),
          "leakbad": (False, None, 1), "leak2": (False, None, 1), "e400": (False, None, 1),
          "matchbad": (False, None, 1),
          "nan": (False, None, 1), "autotrunc": (False, None, 1)}
assert set(EXPECT) == set(BEHAVIOURS)

# failed behaviour -> (reason, exactly; transient; status)
FAIL = {"e503always": (f"gave up after {MAX_RETRIES + 1} attempts: HTTP 503 from /generate: server is overloaded",
                       True, 503),
        "badjson": ('malformed JSON from /generate: {"text": "x", "output_ids": [1, 2', False, 200),
        "abort": ("aborted by the server: out of memory", False, None),
        "leakbad": ("len(output_ids)=9 != completion_tokens=4, and the 5 extra ids are not SGLang 0.5.0–0.5.4's leak "
                    "(exactly the prompt's last 5 ids)", False, None),
        "leak2": ("len(output_ids)=6 != completion_tokens=4, and the 2 extra ids are not SGLang 0.5.0–0.5.4's leak "
                  "(exactly the prompt's last 5 ids)", False, None),
        "nan": ("finish_reason stop matched 'NaN happened', not a token id: the server ended the sample itself "
                "(SGLang's 'NaN happened': a sampled id outside the vocabulary, replaced by an EOS id)", False, None),
        "autotrunc": ("meta_info.prompt_tokens=6 != len(prompt_ids)=9: the server did not generate from the prompt "
                      "sent (SGLang --allow-auto-truncate cuts long prompts)", False, None),
        "e400": (f"HTTP 400 from /generate: {LONG_PROMPT_MSG}", False, 400),
        "matchbad": ("finish matched token 2 but the last output id is 7", False, None)}

def engine(url, **kw):
    return SGLangEngine(url, **{"timeout": 1, "timeout_per_token": 0, "max_retries": MAX_RETRIES, "backoff": 0.01,
                                "max_backoff": 0.05, **kw})

def write_prompts(run, recs):
    with JsonlWriter(run/"prompts"/"prompts.jsonl") as w:
        for r in recs: w.write(r)

def run_generate(run, url, engine_kw=None, **kw):
    "One `generate_async` on a fresh engine (an httpx client belongs to one event loop); returns (manifest, seconds)."
    async def go():
        e = engine(url, **(engine_kw or {}))
        try: return await generate_async(run, engines=[e], **{"max_new_tokens": 4, "concurrency": 4, **kw},
                                         progress=False)
        finally: await e.aclose()
    t0 = time.time()
    m = asyncio.run(go())
    return m, time.time() - t0

def by_id(path): return {r["id"]: r for r in read_jsonl(path)}

def test_generate_faults_retries_and_accounting(tmp_path):
    run = tmp_path/"run"
    ids = [f"{b}-{i}" for b in BEHAVIOURS for i in range(2)]
    write_prompts(run, [{"id": i, "prompt_ids": PROMPT} for i in ids] + [{"id": "long-0", "prompt_ids": LONG}])
    ok_ids = {i for i in ids if EXPECT[i.rsplit("-", 1)[0]][0]}
    fail_ids = set(ids) - ok_ids
    gen = run/"generate"
    with FaultServer(context_length=CTX) as srv:
        # --- first run: every fault resolved or recorded -----------------------------------------------------
        m, dt = run_generate(run, srv.url)
        for rid in ("hang1-0", "hang1-1"):   # the client timed out (1 s) and retried while the server still slept
            t = [a for r, n, b, a in srv.requests if r == rid]
            assert len(t) == 2 and 0.9 < t[1] - t[0] < srv.hang_s, (rid, t)
            assert srv.rids[rid] == [rid, rid + "~a2"]  # a fresh rid: the first attempt was still running on the server
        assert srv.rids["e500x2-0"] == ["e500x2-0", "e500x2-0~a2", "e500x2-0~a3"]
        assert not srv.duplicates
        c = m["counts"]
        assert (c["items"], c["success"], c["failed"], c["skipped"]) == (33, 14, 18, 1)
        assert c["success"] + c["failed"] + c["skipped"] == c["items"]
        assert c["this_run"] == {"tokens": 14 * 4, "new_ok": 14, "new_failed": 18, "new_skipped": 1}
        # room for one new token: SGLang needs prompt + new < context
        assert m["config"]["max_prompt_tokens"] == CTX - 2
        # the context length comes from /v1/models: /get_server_info's context_length is null, as on a real server
        assert (m["config"]["engines"][0]["version"] == "0.5.3-fault"
                and m["config"]["engines"][0]["context_length"] == CTX)
        assert m["summary"]["repaired"] == 2 and m["summary"]["finish"] == {"stop": 12, "length": 2}

        assert dict(srv.hits) == {i: EXPECT[i.rsplit("-", 1)[0]][2] for i in ids}   # long-0 never sent
        assert (srv.paths["GET /health_generate"] == srv.paths["GET /get_server_info"]
                == srv.paths["GET /get_model_info"] == 1)
        body = srv.last_body["ok-0"]
        assert body["input_ids"] == PROMPT and body["stream"] is False and body["rid"] == "ok-0"
        assert body["sampling_params"]["max_new_tokens"] == 4 and body["sampling_params"]["no_stop_trim"] is True
        # sent, never left to the server
        assert {k: body["sampling_params"][k] for k in ("repetition_penalty",
                                                        "frequency_penalty", "presence_penalty")} == {
            "repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}

        oks, fails, skips = by_id(gen/"generations.jsonl"), by_id(gen/"failed.jsonl"), by_id(gen/"skipped.jsonl")
        assert set(oks) == ok_ids and set(fails) == fail_ids and set(skips) == {"long-0"}
        assert len(read_jsonl(gen/"generations.jsonl")) == 14 and len(read_jsonl(gen/"failed.jsonl")) == 18
        for i, r in oks.items():
            b = i.rsplit("-", 1)[0]
            want_finish = {"type": "length", "length": 4} if b == "eosatlen" else {"type": "stop", "matched": 2}
            assert r["output_ids"] == OK_IDS and r["finish_reason"] == want_finish, i
            assert (r["prompt_ids"] == PROMPT
                    and r["usage"] == {"prompt_tokens": 9, "completion_tokens": 4, "cached_tokens": 0}), i
            assert r["meta"]["attempts"] == EXPECT[b][1], (i, r["meta"])
            assert r["meta"].get("repaired_prompt_prefix") == (5 if b == "leak" else None), (i, r["meta"])
            assert r["meta"]["rid"] == (i if EXPECT[b][1] == 1 else f"{i}~a{EXPECT[b][1]}"), (i, r["meta"])
            assert r["sampling"]["repetition_penalty"] == 1.0 and r["sampling"]["presence_penalty"] == 0.0
            assert r["engine"]["kind"] == "sglang" and r["engine"]["url"] == srv.url
        for i, r in fails.items():
            reason, transient, status = FAIL[i.rsplit("-", 1)[0]]
            assert (r["reason"], r["transient"], r["status"]) == (reason, transient, status), (i, r)
            assert r["engine"] == {"kind": "sglang", "url": srv.url}
        assert "62" in skips["long-0"]["reason"] and "100 tokens" in skips["long-0"]["reason"]
        first_fails, first_hits = fails, dict(srv.hits)

        # --- second run: nothing left to do, nothing sent, nothing rewritten -----------------------------------
        files = {p: p.read_bytes() for p in (gen/"generations.jsonl", gen/"failed.jsonl", gen/"skipped.jsonl")}
        m2, _ = run_generate(run, srv.url)
        assert m2["counts"]["this_run"] == {"tokens": 0, "new_ok": 0, "new_failed": 0, "new_skipped": 0}
        assert {k: m2["counts"][k] for k in ("items", "success", "failed", "skipped")} == {
            "items": 33, "success": 14, "failed": 18, "skipped": 1}
        assert dict(srv.hits) == first_hits
        assert {p: p.read_bytes() for p in files} == files

        # --- retry_failed: exactly the failed ids again, and they fail the same way --------------------------------
        m3, _ = run_generate(run, srv.url, retry_failed=True)
        c3 = m3["counts"]
        assert c3["this_run"] == {"tokens": 0, "new_ok": 0, "new_failed": 18, "new_skipped": 0}
        assert (c3["items"], c3["success"], c3["failed"], c3["skipped"]) == (33, 14, 18, 1)
        retried = {i: srv.hits[i] - first_hits.get(i, 0) for i in set(srv.hits) | set(first_hits)}
        assert {i for i, d in retried.items() if d} == fail_ids
        assert retried == {i: (MAX_RETRIES + 1 if i.startswith("e503always") else 1) if i in fail_ids else 0
                           for i in ids}
        assert len(read_jsonl(gen/"failed.jsonl")) == 18          # replaced, not appended
        assert by_id(gen/"failed.jsonl") == first_fails
        assert (gen/"generations.jsonl").read_bytes() == files[gen/"generations.jsonl"]

def test_engine_generate_direct():
    "`SGLangEngine` alone: start() reads the server, generate() retries 500s, fails fast on 400, gives up on 503."
    async def go(url):
        e = engine(url, max_retries=2)
        try:
            info = await e.start()
            g = await e.generate(PROMPT, Sampling(max_new_tokens=4), rid="e500x2-0")
            with pytest.raises(PermanentError) as e400:
                await e.generate(PROMPT, Sampling(max_new_tokens=4), rid="e400-0")
            with pytest.raises(TransientError) as e503:
                await e.generate(PROMPT, Sampling(max_new_tokens=4), rid="e503always-0")
            batch = await e.generate_many([PROMPT] * 3, Sampling(max_new_tokens=4), rids=["ok-9", "abort-9", "leak-9"])
            return info, g, e400.value, e503.value, batch
        finally: await e.aclose()
    with FaultServer() as srv:
        info, g, e400, e503, batch = asyncio.run(go(srv.url))
        assert info == {"kind": "sglang", "url": srv.url, "version": "0.5.3-fault",
                        "model": "fault/model", "context_length": 4096}
        assert (isinstance(g, Generation) and g.output_ids == OK_IDS
                and g.finish_reason == {"type": "stop", "matched": 2})
        assert g.meta["attempts"] == 3 and g.usage["completion_tokens"] == 4
        assert (e400.status, e400.transient) == (400, False) and LONG_PROMPT_MSG in e400.message
        assert (e503.status, e503.transient) == (503, True) and e503.message.startswith("gave up after 3 attempts")
        assert dict(srv.hits) == {"e500x2-0": 3, "e400-0": 1, "e503always-0": 3, "ok-9": 1, "abort-9": 1, "leak-9": 1}
        ok, ab, lk = batch
        assert isinstance(ok, Generation) and ok.output_ids == OK_IDS and ok.meta["batch"] == 3
        assert isinstance(ab, PermanentError) and "out of memory" in ab.message
        assert isinstance(lk, Generation) and lk.output_ids == OK_IDS and lk.meta["repaired_prompt_prefix"] == 5

def test_triplicate_prompt_id_is_accounted(tmp_path):
    "Three records with one id: one is generated, the other two are skipped as duplicates, and the counts add up."
    run = tmp_path/"run"
    write_prompts(run, [{"id": "ok-0", "prompt_ids": PROMPT}] * 3 + [{"id": "ok-1", "prompt_ids": PROMPT}])
    with FaultServer() as srv:
        m, _ = run_generate(run, srv.url)
        c = m["counts"]
        assert (c["items"], c["success"], c["failed"], c["skipped"]) == (4, 2, 0, 2)
        assert dict(srv.hits) == {"ok-0": 1, "ok-1": 1}

def test_duplicate_prompt_id_rerun_does_no_new_work(tmp_path):
    run = tmp_path/"run"
    write_prompts(run, [{"id": "ok-0", "prompt_ids": PROMPT}] * 2)
    with FaultServer() as srv:
        m, _ = run_generate(run, srv.url)
        assert {k: m["counts"][k] for k in ("items", "success", "failed", "skipped")} == {
            "items": 2, "success": 1, "failed": 0, "skipped": 1}
        skipped = (run/"generate"/"skipped.jsonl").read_bytes()
        m2, _ = run_generate(run, srv.url)
        assert dict(srv.hits) == {"ok-0": 1}
        assert m2["counts"]["skipped"] == 1
        assert (run/"generate"/"skipped.jsonl").read_bytes() == skipped          # a rerun writes no skip line again
        assert m2["counts"]["this_run"] == {"tokens": 0, "new_ok": 0, "new_failed": 0, "new_skipped": 0}

def test_max_new_tokens_clamped_to_the_context(tmp_path):
    "A prompt near the context gets max_new_tokens clamped to what fits (and recorded); one with no room is skipped."
    run = tmp_path/"run"
    P = lambda n: list(range(1, n + 1))
    write_prompts(run, [{"id": "ok-fits", "prompt_ids": P(9)}, {"id": "ok-near", "prompt_ids": P(60)},
                        {"id": "ok-edge", "prompt_ids": P(62)}, {"id": "ok-full", "prompt_ids": P(63)}])
    with FaultServer(context_length=CTX) as srv:
        m, _ = run_generate(run, srv.url)
        c = m["counts"]
        assert (c["items"], c["success"],
                c["failed"], c["skipped"]) == (4, 3, 0, 1), by_id(run/"generate"/"failed.jsonl")
        oks = by_id(run/"generate"/"generations.jsonl")
        assert srv.last_body["ok-near"]["sampling_params"]["max_new_tokens"] == 3           # 60 + 3 < 64
        assert oks["ok-near"]["sampling"]["max_new_tokens"] == 3
        assert oks["ok-near"]["meta"]["max_new_tokens_clamped"] == {"asked": 4, "sent": 3, "context_length": CTX}
        assert oks["ok-edge"]["meta"]["max_new_tokens_clamped"]["sent"] == 1
        assert ("max_new_tokens_clamped" not in oks["ok-fits"]["meta"]
                and oks["ok-fits"]["sampling"]["max_new_tokens"] == 4)
        assert m["summary"]["clamped"] == 2
        assert "63 tokens" in by_id(run/"generate"/"skipped.jsonl")["ok-full"]["reason"] and "ok-full" not in srv.hits

def test_read_timeout_grows_with_max_new_tokens(tmp_path):
    ("A base timeout shorter than the generation is extended by timeout_per_token: a slow answer arrives "
     "on the first attempt.")
    async def go(url):
        e = engine(url, timeout=1, timeout_per_token=1.0)   # 1 + 4 * 1.0 = 5 s > the server's 3 s
        try: return await e.generate(PROMPT, Sampling(max_new_tokens=4), rid="hang1-0")
        finally: await e.aclose()
    with FaultServer() as srv:
        g = asyncio.run(go(srv.url))
        assert g.meta["attempts"] == 1 and dict(srv.hits) == {"hang1-0": 1} and g.output_ids == OK_IDS

def test_rerun_with_a_smaller_limit_or_other_prompts(tmp_path):
    "Counts follow the current item set; records on file for other items are reported apart, never an accounting error."
    run = tmp_path/"run"
    write_prompts(run, [{"id": f"ok-{i}", "prompt_ids": PROMPT} for i in range(6)]
                  + [{"id": "e400-0", "prompt_ids": PROMPT}])
    with FaultServer() as srv:
        m, _ = run_generate(run, srv.url)
        assert (m["counts"]["success"], m["counts"]["failed"]) == (6, 1)
        m2, _ = run_generate(run, srv.url, n_prompts=3)
        c = m2["counts"]
        assert (c["items"], c["success"], c["failed"], c["skipped"]) == (3, 3, 0, 0)
        assert c["not_in_items"] == {"success": 3, "failed": 1, "skipped": 0}
        assert c["this_run"]["new_ok"] == 0 and m2["summary"]["output_tokens"] == 3 * len(OK_IDS)
        other = tmp_path/"other.jsonl"
        with JsonlWriter(other) as w:
            for i in (4, 5, 6, 7): w.write({"id": f"ok-{i}", "prompt_ids": PROMPT})
        m3, _ = run_generate(run, srv.url, prompts_file=other)
        c = m3["counts"]
        assert (c["items"], c["success"], c["this_run"]["new_ok"]) == (4, 4, 2)
        assert c["not_in_items"] == {"success": 4, "failed": 1, "skipped": 0}
