"""Agentic conversations regenerated through their tool calls, on the real Qwen3 and Kimi-K2.5 templates: the chain
goes on through recorded tool results only where the regenerated calls are the recorded ones, and the history rebuilt
from the regenerated ids re-renders token for token; end to end through SGLang's `/generate` wire format."""
import json, signal, subprocess, time
from pathlib import Path
import pytest
from conftest import BIN
from eagle3nb.core import Run, read_jsonl, read_manifest
from eagle3nb.models import load_tokenizer
from eagle3nb.prompts import prepare, normalize_row
from eagle3nb.segment import check_record, next_turn, segment_output, training_row
from eagle3nb.templates import derive_profile
from eagle3nb.validate import validate

DATA = Path(__file__).parent/"data"/"tool_conversations.jsonl"
ROWS = {r["id"]: r for r in read_jsonl(DATA)}

@pytest.fixture(scope="module")
def qwen(tokenizer_files): return tokenizer_files/"qwen3"

def qwen_turn(tok, reasoning:str, calls=(), answer:str="") -> list:
    "A Qwen3 turn as the model emits it: reasoning, the answer, Hermes JSON calls in <tool_call>, <|im_end|>."
    e = lambda s: tok.encode(s, add_special_tokens=False)
    ids = [151667] + e(f"\n{reasoning}\n") + [151668] + e("\n\n" + answer)
    for i, (name, args) in enumerate(calls):
        body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
        ids += (e("\n") if i or answer else []) + [151657] + e(f"\n{body}\n") + [151658]
    return ids + [151645]

def kimi_turn(tok, reasoning:str, calls=(), answer:str="", first:int=0) -> list:
    "A Kimi-K2.5 turn as the model emits it: reasoning closed by </think>, the answer, the call section, <|im_end|>."
    e = tok.encode
    ids = e(reasoning) + [163607] + (e(answer) if answer else [])
    if calls:
        ids += [163595]
        for i, (name, args) in enumerate(calls):
            ids += ([163597] + e(f"functions.{name}:{first + i}") + [163598] + e(json.dumps(args, ensure_ascii=False))
                    + [163599])
        ids += [163596]
    return ids + [163586]

def _step(tok, prof, prec:dict, out:list, tool_results="matching"):
    "One generated turn of `prec` checked as validate checks it, and what follows it."
    rec = {"id": prec["id"], "prompt_ids": prec["prompt_ids"], "output_ids": out,
           "finish_reason": {"type": "stop", "matched": out[-1]}, "usage": {"completion_tokens": len(out)}}
    segs, probs, checked = check_record(tok, prof, rec, prec)
    assert probs == [] and checked["prompt_rerender"], probs
    nxt, outcome = next_turn(tok, prof, prec, rec, segs, tool_results)
    return (nxt.to_dict() if nxt else None), outcome

def _prompts(tmp_path, target, ids, thinking=None) -> dict:
    rows = [ROWS[i] for i in ids]
    (tmp_path/"in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepare(tmp_path, target=target, inputs=[tmp_path/"in.jsonl"], thinking=thinking, progress=False)
    return {p["id"]: p for p in read_jsonl(Run(tmp_path).prompts)}

def test_qwen3_tool_chain_round_trip_matching_and_parallel(qwen, tmp_path):
    ("Qwen3: a three-step chain and a parallel call go on through the recorded results; each next prompt holds the "
     "turn the model generated token for token, and re-renders exactly from the rebuilt history.")
    tok = load_tokenizer(qwen)
    prof = derive_profile(tok)
    P = _prompts(tmp_path, qwen, ["weather-chain", "two-cities"], thinking=True)
    p, steps = P["weather-chain-t0"], [
        qwen_turn(tok, "Current weather first.", [("get_weather", {"city": "Paris"})]),
        qwen_turn(tok, "Now the forecast.", [("get_forecast", {"city": "Paris", "days": 2})]),
        qwen_turn(tok, "Summarise.", answer="Paris: 21 °C and clear; then 23 °C sunny and 17 °C rain.")]
    for k, out in enumerate(steps):
        nxt, outcome = _step(tok, prof, p, out)
        if k == 2:
            assert (nxt, outcome) == (None, {"status": "end"})
            break
        assert outcome == {"status": "next", "after": "tool"} and nxt["id"] == f"weather-chain-t{k + 1}"
        assert nxt["prompt_ids"][:len(p["prompt_ids"]) + len(out)] == p["prompt_ids"] + out   # token for token
        text = tok.decode(nxt["prompt_ids"][len(p["prompt_ids"]) + len(out):])
        assert text.startswith("\n<|im_start|>user\n<tool_response>\n") and text.endswith("<|im_start|>assistant\n")
        p = nxt
    assert p["turn"] == 2 and [m["role"] for m in p["messages"]] == ["user", "assistant", "tool", "assistant", "tool"]
    two = qwen_turn(tok, "Both cities at once.",
                    [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})])
    nxt, outcome = _step(tok, prof, P["two-cities-t0"], two)
    n = len(P["two-cities-t0"]["prompt_ids"])
    assert outcome["after"] == "tool" and nxt["prompt_ids"][:n + len(two)] == P["two-cities-t0"]["prompt_ids"] + two
    assert tok.decode(nxt["prompt_ids"][n + len(two):]).count("<tool_response>") == 2   # both results, in order
    assert _step(tok, prof, nxt, qwen_turn(tok, "Compare.", answer="Rome is warmer."))[1] == {"status": "end"}

def test_kimi_tool_chain_round_trip_matching_and_parallel(kimi, kimi_dir, tmp_path):
    ("Kimi-K2.5: the chain goes on through the results, the results answer the ids the model wrote "
     "(`## Return of functions.get_weather:0`), and each next prompt holds the generated turn token for token.")
    prof = derive_profile(kimi)
    P = _prompts(tmp_path, kimi_dir, ["weather-chain", "two-cities"])
    p = P["weather-chain-t0"]
    for k, out in enumerate([kimi_turn(kimi, "Current weather first.", [("get_weather", {"city": "Paris"})]),
                             kimi_turn(kimi, "Now the forecast.", [("get_forecast", {"city": "Paris", "days": 2})],
                                       first=1)]):
        nxt, outcome = _step(kimi, prof, p, out)
        assert outcome == {"status": "next", "after": "tool"}
        assert nxt["prompt_ids"][:len(p["prompt_ids"]) + len(out)] == p["prompt_ids"] + out
        rest = kimi.decode(nxt["prompt_ids"][len(p["prompt_ids"]) + len(out):])
        want_id = ["functions.get_weather:0", "functions.get_forecast:1"][k]
        assert rest.startswith(f"<|im_system|>tool<|im_middle|>## Return of {want_id}\n"), rest[:80]
        p = nxt
    end = kimi_turn(kimi, "Summarise.", answer="Paris: 21 °C now, then sun and rain.")
    assert _step(kimi, prof, p, end) == (None, {"status": "end"})
    two = kimi_turn(kimi, "Both at once.", [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})])
    q = P["two-cities-t0"]
    nxt, outcome = _step(kimi, prof, q, two)
    assert outcome["after"] == "tool" and nxt["prompt_ids"][:len(q["prompt_ids"]) + len(two)] == q["prompt_ids"] + two
    rest = kimi.decode(nxt["prompt_ids"][len(q["prompt_ids"]) + len(two):])
    assert rest.index("Return of functions.get_weather:0") < rest.index("Return of functions.get_weather:1")

@pytest.mark.parametrize("family", ["qwen3", "kimi"])
def test_tool_chain_stops_where_the_calls_differ(family, qwen, kimi, kimi_dir, tmp_path):
    "Another function, other arguments, another count, no call: the chain stops and says why; `recorded` goes on."
    tok, target = (load_tokenizer(qwen), qwen) if family == "qwen3" else (kimi, kimi_dir)
    turn = qwen_turn if family == "qwen3" else kimi_turn
    prof = derive_profile(tok)
    P = _prompts(tmp_path, target, ["fx-changed", "weather-chain"], thinking=True if family == "qwen3" else None)
    fx, wc = P["fx-changed-t0"], P["weather-chain-t0"]
    cases = [(fx, turn(tok, "Convert.", [("convert_currency", {"amount": 100.0, "from": "usd", "to": "eur"})]),
              "arguments"),
             (wc, turn(tok, "Forecast.", [("get_forecast", {"city": "Paris", "days": 2})]), "function_name"),
             (wc, turn(tok, "Both.", [("get_weather", {"city": "Paris"}),
                                      ("get_forecast", {"city": "Paris", "days": 2})]), "call_count"),
             (wc, turn(tok, "No tools.", answer="I cannot look that up."), "no_tool_call")]
    for prec, out, reason in cases:
        nxt, outcome = _step(tok, prof, prec, out)
        assert nxt is None and (outcome["status"], outcome["reason"]) == ("stopped", reason), outcome
        again, how = _step(tok, prof, prec, out, "recorded")
        assert how["status"] == "next" and how["unmatched"] == reason and again["source"]["unmatched"] == reason
        assert _step(tok, prof, prec, out, "stop")[1]["reason"] == "tool_results_stop"

def test_tool_conversations_read_in_every_format(qwen, kimi_dir, tmp_path):
    ("The tool-use set as OpenAI messages, as ShareGPT-style function_call / observation turns and as SpecForge rows "
     "reads to the same conversations, and prepares with both real templates, the tools rendered.")
    def sharegpt(r):
        conv = []
        for m in r["messages"]:
            if m.get("tool_calls"):
                calls = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                         for c in m["tool_calls"]]
                conv.append({"from": "function_call", "value": json.dumps(calls if len(calls) > 1 else calls[0])})
            else: conv.append({"from": {"user": "human", "assistant": "gpt", "tool": "observation"}[m["role"]],
                               "value": m["content"]})
        return {"id": r["id"], "tools": json.dumps([t["function"] for t in r["tools"]]), "conversations": conv}
    calls = lambda m: [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                       for c in m.get("tool_calls") or []]
    strip = lambda ms: [(m["role"], m.get("content") or "", calls(m)) for m in ms]
    for r in ROWS.values():
        a, b = normalize_row(r, "x"), normalize_row(sharegpt(r), "x")
        c = normalize_row({"id": r["id"], "tools": r["tools"], "conversations": r["messages"]}, "x")
        assert (a.format, b.format, c.format) == ("openai", "sharegpt", "specforge")
        assert strip(a.messages) == strip(b.messages) == strip(c.messages) and a.tools == b.tools == c.tools
    for target, name in ((qwen, "qwen3"), (kimi_dir, "kimi")):
        (tmp_path/name/"in.jsonl").parent.mkdir()
        (tmp_path/name/"in.jsonl").write_text("".join(json.dumps(sharegpt(r)) + "\n" for r in ROWS.values()))
        m = prepare(tmp_path/name, target=target, inputs=[tmp_path/name/"in.jsonl"], progress=False)
        assert m["counts"]["accepted"] == len(ROWS), m["counts"]
        tok = load_tokenizer(target)
        text = tok.decode(read_jsonl(Run(tmp_path/name).prompts)[0]["prompt_ids"])
        assert "get_forecast" in text   # the tools reached the template

def test_tool_loss_mask_never_covers_template_text(qwen, tmp_path):
    ("Nothing the template writes is a label: a thinking-off prompt's empty <think></think>, and on turn 2 of a "
     "chain the rendered history and the tool results; only the turn's own output ids are.")
    tok = load_tokenizer(qwen)
    prof = derive_profile(tok)
    P = _prompts(tmp_path, qwen, ["weather-chain"], thinking=False)
    p = P["weather-chain-t0"]
    assert tok.decode(p["prompt_ids"]).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    e = lambda s: tok.encode(s, add_special_tokens=False)
    steps = [("get_weather", {"city": "Paris"}), ("get_forecast", {"city": "Paris", "days": 2}), None]
    for k, args in enumerate(steps):
        body = json.dumps({"name": args[0], "arguments": args[1]}) if args else None
        out = ([151657] + e(f"\n{body}\n") + [151658, 151645]) if args else e("Sunny, then rain.") + [151645]
        rec = {"id": p["id"], "prompt_ids": p["prompt_ids"], "output_ids": out}
        segs, probs = segment_output(prof, p["prompt_ids"], out, {"type": "stop"}, tok)
        row = training_row(prof, rec, k, {"type": "stop"}, segs)
        assert probs == [] and row["loss_mask"] == [0] * len(p["prompt_ids"]) + [1] * len(out)
        if args: p, _ = _step(tok, prof, p, out)
    assert p["turn"] == 2 and tok.decode(p["prompt_ids"]).count("<tool_response>") == 2

def _qwen_script(tok) -> dict:
    "The target's turns (rid -> output ids), tool calls as Qwen3 emits them; fx-changed writes other arguments."
    W, F = ("get_weather", {"city": "Paris"}), ("get_forecast", {"city": "Paris", "days": 2})
    return {"weather-chain-t0": qwen_turn(tok, "Current weather first.", [W]),
            "weather-chain-t1": qwen_turn(tok, "Now the forecast.", [F]),
            "weather-chain-t2": qwen_turn(tok, "Summarise.", answer="21 °C and clear; then sun, then rain."),
            "two-cities-t0": qwen_turn(tok, "Both.", [W, ("get_weather", {"city": "Rome"})]),
            "two-cities-t1": qwen_turn(tok, "Compare.", answer="Rome is warmer: 27 °C against 21 °C."),
            "fx-changed-t0": qwen_turn(tok, "Convert.", [("convert_currency", {"amount": 100.0, "from": "usd",
                                                                               "to": "eur"})]),
            "weather-followup-t0": qwen_turn(tok, "Look it up.", [("get_weather", {"city": "Oslo"})]),
            "weather-followup-t1": qwen_turn(tok, "Report.", answer="Oslo: 3 °C with snow."),
            "weather-followup-t2": qwen_turn(tok, "Advise.", answer="Yes, take a warm coat.")}

def _generate(run, url, prompts_file=None) -> subprocess.Popen:
    cmd = [str(BIN/"eagle3nb"), "generate", "--run", str(run), "--engine", "sglang", "--urls", url,
           "--concurrency", "1", "--max_new_tokens", "256"]
    cmd += ["--prompts_file", str(prompts_file)] if prompts_file else []
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

def test_tool_chain_end_to_end_through_sglang_wire_with_kill_9(qwen, tmp_path):
    ("prepare -> generate (SGLang /generate, killed -9 at a request the server reports, then resumed) -> validate -> "
     "next turns -> generate -> validate, three steps: every record is chained, ended or stopped by reason.")
    from tool_server import ScriptedServer
    tok = load_tokenizer(qwen)
    script = _qwen_script(tok)
    (tmp_path/"in.jsonl").write_text(DATA.read_text())
    prepare(tmp_path/"r0", target=qwen, inputs=[tmp_path/"in.jsonl"], thinking=True, progress=False)
    chains, prompts_file = [], None
    with ScriptedServer(script, hold="fx-changed-t0", context_length=8192) as srv:
        for step in range(3):
            run = tmp_path/f"r{step}"
            p = _generate(run, srv.url, prompts_file)
            if step == 0:   # the third request arrives: the first two are on file, the third never answered
                t0 = time.monotonic()
                while not srv.arrived("fx-changed-t0"):
                    assert p.poll() is None and time.monotonic() - t0 < 120, p.stdout.read() if p.poll() else "slow"
                    time.sleep(0.02)
                p.send_signal(signal.SIGKILL)
                p.wait(30)
                done = [o["id"] for o in read_jsonl(Run(run).generations)]
                assert done == ["weather-chain-t0", "two-cities-t0"], done
                srv.release()
                while not srv.idle(): time.sleep(0.02)
                p = _generate(run, srv.url)   # the rerun resumes
            out, _ = p.communicate(timeout=300)
            assert p.returncode == 0, out
            gm = read_manifest(Run(run).generate_dir)
            c = gm["counts"]
            assert (c["success"], c["failed"], c["skipped"]) == (c["items"], 0, 0)
            ids = [o["id"] for o in read_jsonl(Run(run).generations)]
            assert len(ids) == len(set(ids)) == gm["counts"]["items"]   # nothing lost, nothing doubled
            m = validate(run, progress=False)
            assert m["counts"]["rejected"] == 0 and m["counts"]["accepted"] == len(ids)
            chains.append(m["counts"]["chain"])
            recs = read_jsonl(Run(run).records)
            assert all(r["next_turn"]["status"] in ("next", "end", "stopped") for r in recs)
            prompts_file = Run(run).validate_dir/"next_prompts.jsonl"
            assert len(read_jsonl(prompts_file)) == m["counts"]["next_turn_prompts"]
        # each regenerated turn's prompt holds the previous turn as generated, token for token
        for rid, prompt in srv.prompts.items():
            if rid.endswith("-t0"): continue
            prev = rid[:-1] + str(int(rid[-1]) - 1)
            if rid == "weather-followup-t2": continue   # after a user turn: the template drops the reasoning
            head = srv.prompts[prev] + script[prev]
            assert prompt[:len(head)] == head, rid
    assert srv.hits["fx-changed-t0"] == 2 and all(srv.hits[r] == 1 for r in script if r != "fx-changed-t0")
    assert "fx-changed-t1" not in srv.hits   # the changed call's recorded result was never used
    keys = ("after_user", "after_tool", "ended", "stopped", "regenerated_after_tool")
    got = [{k: c[k] for k in keys} for c in chains]
    print(json.dumps(got))
    assert got == [
        {"after_user": 0, "after_tool": 3, "ended": 0, "stopped": {"arguments": 1},
         "regenerated_after_tool": {"read": 0, "accepted": 0}},
        {"after_user": 1, "after_tool": 1, "ended": 1, "stopped": {},
         "regenerated_after_tool": {"read": 3, "accepted": 3}},
        {"after_user": 0, "after_tool": 0, "ended": 2, "stopped": {},
         "regenerated_after_tool": {"read": 1, "accepted": 1}}]
    stop = [r for r in read_jsonl(Run(tmp_path/"r0").records) if r["next_turn"]["status"] == "stopped"]
    assert [(r["id"], r["next_turn"]["reason"]) for r in stop] == [("fx-changed-t0", "arguments")]
    assert "stopped: `arguments`" in (Run(tmp_path/"r0").validate_dir/"report.md").read_text()
    # `recorded` reuses the result after the changed call too, and the report says so (through the CLI's flag)
    import shutil
    shutil.copytree(tmp_path/"r0", tmp_path/"r0rec")
    r = subprocess.run([str(BIN/"eagle3nb"), "validate", "--run", str(tmp_path/"r0rec"), "--tool_results", "recorded"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    ch = read_manifest(Run(tmp_path/"r0rec").validate_dir)["counts"]["chain"]
    assert (ch["tool_results"], ch["after_tool"], ch["stopped"], ch["recorded_unmatched"]) == (
        "recorded", 4, {}, {"arguments": 1})
    md = (Run(tmp_path/"r0rec").validate_dir/"report.md").read_text()
    assert "reused after calls that differed: `arguments` 1" in md
