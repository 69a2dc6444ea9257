"Token-boundary validation on the real Qwen3 and Kimi-K2.5 tokenizers (tests/data/tokenizers)."
import json, shutil
from pathlib import Path
import pytest
from eagle3nb.core import JsonlWriter, read_jsonl
from eagle3nb.models import load_tokenizer
from eagle3nb.prompts import render_prompt, prepare
from eagle3nb.templates import derive_profile
from eagle3nb.segment import segment_output, next_turn_prompt, check_record
from eagle3nb.validate import validate

@pytest.fixture(scope="module")
def qwen(tokenizer_files): return tokenizer_files/"qwen3"

def test_kimi_profile_from_the_tokenizer(kimi):
    tok, p = kimi, derive_profile(kimi)
    assert (p.family, p.think_open, p.think_close,
            p.tool_open, p.tool_close) == ("kimi", 163606, 163607, 163595, 163596)
    assert p.tool_inner == [163597, 163598, 163599] and p.end_ids == [163586, 163585]
    assert {163587, 163588, 163594, 163584, 163839} <= set(p.forbidden_ids)
    assert [163588, tok.encode("assistant")[0], 163601, 163606] in p.generation_prompts        # K2.5 pre-opens <think>
    assert [163588, tok.encode("assistant")[0], 163601, 163606, 163607] in p.generation_prompts # thinking off

def _kimi_sample(tok, reasoning="Need the tool.", calls=(("get_weather", '{"city": "Paris"}'),),
                 answer="", end=(163586,)):
    e = lambda s: tok.encode(s)
    out = e(reasoning) + [163607] + e(answer)
    if calls:
        out += [163595]
        for i, (name, args) in enumerate(calls):
            out += [163597] + e(f"functions.{name}:{i}") + [163598] + e(args) + [163599]
        out += [163596]
    return out + list(end)

def test_kimi_checks(kimi):
    tok, p = kimi, derive_profile(kimi)
    P = render_prompt(tok, [{"role": "user", "content": "Weather in Paris?"}])
    stop = {"type": "stop"}
    def checks(out, finish=stop, prompt=P):
        return sorted({x.check for x in segment_output(p, prompt, out, finish, tok)[1]})
    good = _kimi_sample(tok)
    segs, probs = segment_output(p, P, good, stop, tok)
    assert probs == [] and [s[0] for s in segs] == ["reasoning", "tool_call", "end"]
    assert checks(good + [163585]) == []                                       # <|im_end|> then [EOS]
    assert checks(_kimi_sample(tok, calls=(("a", "{}"), ("b", "{}")), answer="Checking.")) == []
    bad_order = good[:]
    i = bad_order.index(163598)
    bad_order[i] = 163599                                                    # argument marker replaced by call end
    assert checks(bad_order) == ["tool_calls"]
    assert checks([t for t in good if t != 163596]) == ["tool_calls"]         # section never closed
    assert checks([163606] + good) == ["reasoning"]                            # <think> again: the prompt opened it
    assert checks(tok.encode("x") + [163586]) == ["reasoning"]                 # reasoning never closed
    assert (checks(tok.encode("r") + [163607] + tok.encode("a") + [163586, 163587] + tok.encode("user"))
            == ["end", "turn_start"])
    assert checks(good[:5], {"type": "length"}) == ["truncated"]
    leak = [163588] + tok.encode("assistant") + [163601, 163606] + good        # a leaked prompt tail
    assert checks(leak) == ["reasoning", "turn_start"]

def test_qwen3_prompt_checks(qwen, tmp_path):
    tok = load_tokenizer(qwen)
    p = derive_profile(tok)
    msgs = [{"role": "user", "content": "Hi"}]
    P = render_prompt(tok, msgs, thinking=True)
    out = ([151667] + tok.encode("\nhm\n", add_special_tokens=False) + [151668]
           + tok.encode("\n\nHello!", add_special_tokens=False) + [151645])
    prompt_rec = {"id": "a", "messages": msgs, "options": {"thinking": True}}
    rec = {"id": "a", "prompt_ids": P, "output_ids": out, "finish_reason": {"type": "stop", "matched": 151645},
           "usage": {"completion_tokens": len(out)}}
    assert check_record(tok, p, rec, prompt_rec)[1] == []
    # not what the record says
    wrong = {**rec, "prompt_ids": render_prompt(tok, [{"role": "system", "content": "Be brief."}] + msgs,
                                                thinking=True)}
    assert [x.check for x in check_record(tok, p, wrong, prompt_rec)[1]] == ["prompt_rerender"]
    cut = {**rec, "prompt_ids": P[:-1]}                                           # wrong generation-prompt suffix
    assert {x.check for x in check_record(tok, p, cut, prompt_rec)[1]} == {"prompt_rerender", "generation_prompt"}
    miscount = {**rec, "usage": {"completion_tokens": len(out) + 2}}
    assert [x.check for x in check_record(tok, p, miscount, prompt_rec)[1]] == ["count"]
    oov = {**rec, "output_ids": out[:-1] + [10**7, 151645], "usage": {"completion_tokens": len(out) + 1}}
    assert [x.check for x in check_record(tok, p, oov, prompt_rec)[1]] == ["vocab"]
    # SGLang: an id outside the vocabulary, overwritten by EOS
    nan = {**rec, "finish_reason": {"type": "stop", "matched": "NaN happened"}}
    assert ([(x.check, "not a token id" in x.detail) for x in check_record(tok, p, nan, prompt_rec)[1]]
            == [("finish", True)])
    other = {**rec, "finish_reason": {"type": "stop", "matched": 151643}}           # matched one id, ended on another
    assert [x.check for x in check_record(tok, p, other, prompt_rec)[1]] == ["finish"]
    # SGLang: the end of turn was the last allowed token
    at_budget = {**rec, "finish_reason": {"type": "length", "length": len(out)}}
    assert check_record(tok, p, at_budget, prompt_rec)[1] == []
    cut = {**rec, "output_ids": out[:-1], "finish_reason": {"type": "length", "length": len(out) - 1},
           "usage": {"completion_tokens": len(out) - 1}}
    assert check_record(tok, p, cut, prompt_rec)[1] == []                            # truncated: kept by default
    assert [x.check for x in check_record(tok, p, cut, prompt_rec, drop_truncated=True)[1]] == ["truncated"]

def test_kimi_multiturn_history_is_token_exact(kimi, kimi_dir, tmp_path):
    ("Turn 1's prompt equals what the template renders from turn 0's segments; Kimi keeps <think></think> "
     "for the earlier turn.")
    tok, p = kimi, derive_profile(kimi)
    row = {"id": "k", "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
                                   {"role": "user", "content": "times 3?"}]}
    (tmp_path/"in.jsonl").write_text(json.dumps(row) + "\n")
    prepare(tmp_path, target=kimi_dir, inputs=[tmp_path/"in.jsonl"], progress=False)
    prec = read_jsonl(tmp_path/"prompts/prompts.jsonl")[0]
    out = tok.encode("Add two and two.") + [163607] + tok.encode("It is 4.") + [163586]
    with JsonlWriter(tmp_path/"generate/generations.jsonl") as w:
        w.write({"id": prec["id"], "prompt_id": prec["id"], "prompt_ids": prec["prompt_ids"], "output_ids": out,
                 "finish_reason": {"type": "stop", "matched": 163586}, "usage": {"completion_tokens": len(out)}})
    m = validate(tmp_path, progress=False)
    assert (m["counts"]["accepted"], m["counts"]["next_turn_prompts"]) == (1, 1)
    nxt = read_jsonl(tmp_path/"validate/next_prompts.jsonl")[0]
    want = render_prompt(tok, [{"role": "user", "content": "2+2?"},
                               {"role": "assistant", "content": "It is 4.", "reasoning_content": "Add two and two."},
                               {"role": "user", "content": "times 3?"}])
    assert nxt["id"] == "k-t1" and nxt["turn"] == 1 and nxt["prompt_ids"] == want
    text = tok.decode(nxt["prompt_ids"])
    assert "<|im_assistant|>assistant<|im_middle|><think></think>It is 4.<|im_end|>" in text and "Add two" not in text
    rec = read_jsonl(tmp_path/"validate/records.jsonl")[0]
    assert [s[0] for s in rec["segments"]] == ["prompt", "reasoning", "answer", "end"]
    assert rec["loss_mask"] == [0] * len(prec["prompt_ids"]) + [1] * len(out)

def test_qwen3_tool_call_history(qwen, tmp_path):
    "A Qwen3 tool call's segments become tool_calls in the next turn's history, rendered by the template."
    tok = load_tokenizer(qwen)
    p = derive_profile(tok)
    e = lambda s: tok.encode(s, add_special_tokens=False)
    out = ([151667] + e("\nUse the tool.\n") + [151668] + e("\n\n") + [151657]
           + e('\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n') + [151658, 151645])
    msgs = [{"role": "user", "content": "Weather?"}]
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    row = {"id": "w", "messages": msgs + [{"role": "assistant", "content": "", "tool_calls": [call]},   # as regenerated
                                          {"role": "tool", "content": "{\"temp\": 21}"},
                                           {"role": "user", "content": "Thanks, and tomorrow?"}]}
    prec = {"id": "w-t0", "turn": 0, "messages": msgs, "tools": None, "options": {"thinking": True},
            "source": {"row": row, "assistant_index": 1}}
    segs, probs = segment_output(p, render_prompt(tok, msgs, thinking=True), out, {"type": "stop"}, tok)
    assert probs == []
    nxt = next_turn_prompt(tok, p, prec, {"id": "w-t0", "output_ids": out}, segs)
    text = tok.decode(nxt.prompt_ids)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<tool_response>\n{\"temp\": 21}\n</tool_response>" in text and text.endswith("<|im_start|>assistant\n")

def test_validate_cli_on_synthetic_qwen3_set(qwen, tmp_path):
    "`eagle3nb validate` on a synthetic Qwen3 reasoning/tool-call set: records, rejects, report, SpecForge rows."
    import subprocess, sys
    from conftest import BIN
    tok = load_tokenizer(qwen)
    e = lambda s: tok.encode(s, add_special_tokens=False)
    rows = [{"id": f"s{i}", "messages": [{"role": "user", "content": q}]} for i,
            q in enumerate(["2+2?", "Weather in Oslo?", "Hi"])]
    (tmp_path/"in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert subprocess.run([str(BIN/"eagle3nb"), "prepare", str(tmp_path/"in.jsonl"), "--target", str(qwen), "--run",
                           str(tmp_path),
                           "--thinking", "on"], capture_output=True).returncode == 0
    P = {r["id"]: r for r in read_jsonl(tmp_path/"prompts/prompts.jsonl")}
    outs = {"s0-t0": [151667] + e("\nadd\n") + [151668] + e("\n\n4") + [151645],
            "s1-t0": ([151667] + e("\ntool\n") + [151668] + e("\n\n") + [151657]
                      + e('\n{"name": "w", "arguments": {"city": "Oslo"}}\n') + [151658, 151645]),
            "s2-t0": [151667] + e("\ngreet\n") + [151668] + e("\n\nHello") + [151658, 151645]}   # a stray </tool_call>
    with JsonlWriter(tmp_path/"generate/generations.jsonl") as w:
        for k, o in outs.items():
            w.write({"id": k, "prompt_id": k, "prompt_ids": P[k]["prompt_ids"], "output_ids": o,
                     "finish_reason": {"type": "stop", "matched": 151645}, "usage": {"completion_tokens": len(o)}})
    r = subprocess.run([str(BIN/"eagle3nb"), "validate", "--run", str(tmp_path), "--mask_reasoning"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "validate (qwen3): read 3, accepted 2, rejected 1 (failed checks: tool_calls 1)" in r.stdout
    recs = {x["id"]: x for x in read_jsonl(tmp_path/"validate/records.jsonl")}
    r1 = recs["s1-t0"]
    reasoning = [s for s in r1["segments"] if s[0] == "reasoning"][0]
    assert all(r1["loss_mask"][t] == 0 for t in range(reasoning[1], reasoning[2]))       # --mask_reasoning
    assert sum(r1["loss_mask"]) == len(outs["s1-t0"]) - (reasoning[2] - reasoning[1])
    assert len(read_jsonl(tmp_path/"validate/specforge.jsonl")) == 2
    rep = json.loads((tmp_path/"validate/report.json").read_text())
    assert rep["failed_checks"] == {"tool_calls": 1} and rep["checked"]["prompt_rerender"] == 3
    assert "tool-call close with no open" in (tmp_path/"validate/report.md").read_text()

def test_qwen3_thinking_2507_style_prompt_preopens_reasoning(qwen, tmp_path):
    "A Qwen3-*-Thinking-2507 style template puts `<think>\\n` into the generation prompt: outputs hold only `</think>`."
    d = tmp_path/"thinking2507"
    shutil.copytree(qwen, d)
    cfg = json.loads((d/"tokenizer_config.json").read_text())
    old = "{{- '<|im_start|>assistant\\n' }}"
    assert old in cfg["chat_template"]
    cfg["chat_template"] = cfg["chat_template"].replace(old, "{{- '<|im_start|>assistant\\n<think>\\n' }}")
    (d/"tokenizer_config.json").write_text(json.dumps(cfg))
    (d/"chat_template.jinja").unlink()
    tok = load_tokenizer(d)
    p = derive_profile(tok)
    assert any(tok.decode(g).endswith("<|im_start|>assistant\n<think>\n") for g in p.generation_prompts)
    P = render_prompt(tok, [{"role": "user", "content": "2+2?"}])
    e = lambda s: tok.encode(s, add_special_tokens=False)
    out = e("Add.\n") + [151668] + e("\n\n4") + [151645]
    segs, probs = segment_output(p, P, out, {"type": "stop"}, tok)
    assert probs == [] and [s[0] for s in segs] == ["reasoning", "answer", "end"]
    assert sorted({x.check for x in segment_output(p, P, [151667] + out, {"type": "stop"}, tok)[1]}) == ["reasoning"]

def test_kimi_k2_thinking_template_model_opens_reasoning(tokenizer_files, tmp_path):
    ("Kimi K2-Thinking's template ends the prompt at <|im_middle|>: the model writes <think> itself, "
     "and must close it once.")
    d = tmp_path/"k2t"
    d.mkdir()
    for f in ("tiktoken.model", "tokenizer_config.json"): shutil.copy(tokenizer_files/"kimi-k2"/f, d/f)
    shutil.copy(tokenizer_files/"kimi-k2"/"chat_template.k2-thinking.llamacpp.jinja", d/"chat_template.jinja")
    tok = load_tokenizer(d)
    p = derive_profile(tok)
    P = render_prompt(tok, [{"role": "user", "content": "2+2?"}])
    assert P[-1] == 163601 and tok.decode(P).endswith("<|im_assistant|>assistant<|im_middle|>")
    out = [163606] + tok.encode("add") + [163607] + tok.encode("4") + [163586]
    segs, probs = segment_output(p, P, out, {"type": "stop"}, tok)
    assert probs == [] and [s[0] for s in segs] == ["reasoning", "answer", "end"]
    no_open = out[1:]                                          # </think> without the model's own <think>
    assert sorted({x.check for x in segment_output(p, P, no_open, {"type": "stop"}, tok)[1]}) == ["reasoning"]

def _always_ends_turn(qwen_tiny, d):
    ("tiny-qwen3 (real Qwen3 vocabulary and template) whose greedy first token is always an end of turn: "
     "a model that answers.")
    import shutil, torch
    from safetensors.torch import load_file, save_file
    shutil.copytree(qwen_tiny, d)
    w = load_file(str(d/"model.safetensors"))
    w["model.norm.weight"].zero_()
    w["model.norm.weight"][0] = 1.0                                          # the final state is (x0 / rms, 0, ..., 0)
    w["lm_head.weight"].zero_()
    w["lm_head.weight"][151645, 0] = 1.0
    w["lm_head.weight"][151643, 0] = -1.0
    # argmax: <|im_end|> or <|endoftext|>, both end a turn
    save_file(w, str(d/"model.safetensors"), metadata={"format": "pt"})
    gc = json.loads((d/"generation_config.json").read_text())
    gc["eos_token_id"] = [151645, 151643]
    (d/"generation_config.json").write_text(json.dumps(gc))
    return d

def test_three_turns_chained_through_eagle3nb_serve(tmp_path):
    ("Turn 1 and 2 runs (generated from next_prompts.jsonl) validate like turn 0: prompts found, turn kept, re-render "
     "checked, next turn written.")
    import subprocess
    from conftest import BIN
    from eagle3nb.serve import start_server_process
    from eagle3nb.models import target_dir
    model = _always_ends_turn(target_dir("tiny-qwen3"), tmp_path/"model")
    tok = load_tokenizer(model)
    msgs = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
            {"role": "user", "content": "times 3?"},
            {"role": "assistant", "content": "12"}, {"role": "user", "content": "minus 2?"}]
    (tmp_path/"in.jsonl").write_text(json.dumps({"id": "c", "messages": msgs}) + "\n")
    cli = lambda *a: subprocess.run([str(BIN/"eagle3nb"), *map(str, a)], capture_output=True, text=True)
    r = cli("prepare", tmp_path/"in.jsonl", "--target", model, "--run", tmp_path/"r0", "--thinking", "off")
    assert r.returncode == 0, r.stderr
    proc, url = start_server_process(str(model))
    try:
        for t in range(3):
            run = tmp_path/f"r{t}"
            extra = ["--prompts_file", tmp_path/f"r{t - 1}"/"validate"/"next_prompts.jsonl"] if t else []
            r = cli("generate", "--run", run, "--engine", "sglang", "--urls", url, "--max_new_tokens", "8", *extra)
            assert r.returncode == 0, r.stdout + r.stderr
            r = cli("validate", "--run", run)           # no --prompts, no --target: found through the generate manifest
            assert r.returncode == 0, r.stdout + r.stderr
            m = read_jsonl(run/"validate"/"records.jsonl")
            assert [(x["id"], x["turn"]) for x in m] == [(f"c-t{t}", t)]
            rep = json.loads((run/"validate"/"report.json").read_text())
            assert rep["counts"]["accepted"] == 1 and rep["checked"] == {"prompt_rerender": 1}, rep
            nxt = read_jsonl(run/"validate"/"next_prompts.jsonl")
            assert [x["id"] for x in nxt] == ([f"c-t{t + 1}"] if t < 2 else [])
    finally:
        proc.terminate()
        proc.wait(30)
    last = read_jsonl(tmp_path/"r1"/"validate"/"next_prompts.jsonl")[0]
    hist = [m for m in last["messages"] if m["role"] == "assistant"]
    assert len(hist) == 2 and last["turn"] == 2 and last["options"]["thinking"] is False
    assert last["prompt_ids"] == render_prompt(tok, last["messages"], thinking=False)
    assert (json.loads((tmp_path/"r2"/"validate"/"manifest.json").read_text())["config"]["prompts"]
            == str(tmp_path/"r1"/"validate"/"next_prompts.jsonl"))
