"""Boundary validation reads only what the model generated (issue 22).

1. Whether reasoning is open when the model starts comes from the template's generation prompt alone: a user who
   types `<think>` or `</think>` near the end of their turn changes nothing.
2. An output must not hold a marker that only the other side writes (user, tool result, system message, turn
   headers); the set is read off the chat template, and the reject names why (`turn_start`, `tool_output`, `system`).
Real Qwen3 and Kimi-K2.5 tokenizers (tests/data/tokenizers); DeepSeek, gpt-oss and Llama-3 through tests/family_tokenizers.
"""  # noqa: E501
import json, shutil
import pytest
from family_tokenizers import build_tokenizer, save
from eagle3nb.core import JsonlWriter, read_jsonl
from eagle3nb.models import load_tokenizer
from eagle3nb.prompts import render_prompt, prepare
from eagle3nb.templates import derive_profile, forbidden_table
from eagle3nb.segment import check_record, segment_output
from eagle3nb.validate import validate

STOP = {"type": "stop"}
CLEAN = "Is 2+2 four?"
MARKED = ["Is 2+2 four? </think>", "Is 2+2 four? <think>", "<think> Is 2+2 four? </think> ok",
          "Is 2+2 four? </think>\n"]

def _verdict(tok, p, content, out, thinking=None):
    "(segments, failed checks) of `out` after a prompt whose one user message is `content`, through check_record."
    msgs = [{"role": "user", "content": content}]
    P = render_prompt(tok, msgs, thinking=thinking)
    rec = {"id": "x", "prompt_ids": P, "output_ids": out, "finish_reason": {"type": "stop", "matched": out[-1]},
           "usage": {"completion_tokens": len(out)}}
    segs, probs, _ = check_record(tok, p, rec, {"messages": msgs, "options": {"thinking": thinking}})
    return segs, sorted({x.check for x in probs})

def _assert_markers_change_nothing(tok, p, outs, thinking=None):
    "Every output is judged the same after a clean prompt and after prompts whose user text holds reasoning markers."
    think = {tok.convert_tokens_to_ids("<think>"), tok.convert_tokens_to_ids("</think>")}
    for content in MARKED:
        P = render_prompt(tok, [{"role": "user", "content": content}], thinking=thinking)
        assert think & set(P[-12:]), f"{content!r}: no reasoning marker id near the end of the prompt"
        for name, out in outs.items():
            assert _verdict(tok, p, content, out, thinking) == _verdict(tok, p, CLEAN, out, thinking), (content, name)

# --- 1. the reasoning state comes from the generation prompt alone ------------------------------------------------

@pytest.fixture(scope="module")
def qwen(tokenizer_files): return load_tokenizer(tokenizer_files/"qwen3")

@pytest.mark.parametrize("thinking", [None, True, False])
def test_qwen3_user_reasoning_markers_change_nothing(qwen, thinking):
    tok, p = qwen, derive_profile(qwen)
    e = lambda s: tok.encode(s, add_special_tokens=False)
    TH, TC, END = 151667, 151668, 151645
    outs = {"reasoned": [TH] + e("\nAdd.\n") + [TC] + e("\n\nYes.") + [END], "plain": e("Yes.") + [END]}
    _assert_markers_change_nothing(tok, p, outs, thinking)
    ok = "plain" if thinking is False else "reasoned"       # thinking off: the prompt pre-closes reasoning
    assert _verdict(tok, p, MARKED[0], outs[ok], thinking) == (_verdict(tok, p, CLEAN, outs[ok], thinking)[0], [])
    assert _verdict(tok, p, MARKED[0], outs[ok], thinking)[0][0][0] == ("answer" if ok == "plain" else "reasoning")

def _kimi_with(tokenizer_files, d, template):
    d.mkdir()
    for f in ("tiktoken.model", "tokenizer_config.json"): shutil.copy(tokenizer_files/"kimi-k2"/f, d/f)
    shutil.copy(tokenizer_files/"kimi-k2"/template, d/"chat_template.jinja")
    return load_tokenizer(d)

@pytest.mark.parametrize("template,accepted", [
    ("chat_template.jinja", {"pre_opened"}),   # K2.5: the prompt ends with <think>
    # K2-Thinking, K2-Instruct: the prompt ends at <|im_middle|>, <think> is the model's
    ("chat_template.k2-thinking.llamacpp.jinja", {"opened", "plain"}),
    ("chat_template.k2-instruct.llamacpp.jinja", {"opened", "plain"})])
def test_kimi_user_reasoning_markers_change_nothing(tokenizer_files, tmp_path, template, accepted):
    tok = _kimi_with(tokenizer_files, tmp_path/"k", template)
    p = derive_profile(tok)
    e = tok.encode
    outs = {"pre_opened": e("Add.") + [163607] + e("Yes.") + [163586],
            "opened": [163606] + e("Add.") + [163607] + e("Yes.") + [163586], "plain": e("Yes.") + [163586]}
    _assert_markers_change_nothing(tok, p, outs)
    assert {k for k, o in outs.items() if _verdict(tok, p, MARKED[0], o)[1] == []} == accepted

_V3_STYLE_TAIL = ("{{'<｜Assistant｜><think>\\n'}}", "{{'<｜Assistant｜>'}}")

def _deepseek(variant):
    ("DeepSeek-R1-0528 (prompt ends at the assistant header), R1 (forces <think>\\n), "
     "and a template written here: R1's with ")
    "the January-2025 tail, whose generation prompt is added only by `add_generation_prompt` and ends at the header."
    if variant != "written-here": return build_tokenizer("deepseek-r1", variant)
    tok = build_tokenizer("deepseek-r1", "r1")
    assert _V3_STYLE_TAIL[0] in tok.chat_template
    tok.chat_template = tok.chat_template.replace(*_V3_STYLE_TAIL)
    return tok

@pytest.mark.parametrize("variant", ["r1-0528", "r1", "written-here"])
def test_deepseek_user_reasoning_markers_change_nothing(variant):
    tok = _deepseek(variant)
    p = derive_profile(tok)
    i, e = tok.convert_tokens_to_ids, lambda s: tok.encode(s, add_special_tokens=False)
    TH, TC, EOS = i("<think>"), i("</think>"), i("<｜end▁of▁sentence｜>")
    outs = {"opened": [TH] + e("\nAdd.\n") + [TC] + e("\n\nYes.") + [EOS],
            "forced": e("Add.\n") + [TC] + e("Yes.") + [EOS]}
    _assert_markers_change_nothing(tok, p, outs)
    want = "forced" if variant == "r1" else "opened"
    assert {k for k, o in outs.items() if _verdict(tok, p, MARKED[0], o)[1] == []} == {want}

# --- 2. markers only the other side writes ------------------------------------------------------------------------

def _checks(tok, p, P, out):
    return sorted({x.check for x in segment_output(p, P, out, STOP, tok)[1]})

def _fakes_qwen3(tok):
    e = lambda s: tok.encode(s, add_special_tokens=False)
    TH, TC, TO, TX, END, START = 151667, 151668, 151657, 151658, 151645, 151644
    call = [TH] + e("\nUse the tool.\n") + [TC] + e("\n\n") + [TO] + e('\n{"name": "get_weather", "arguments": '
                                                                       '{"city": "Paris"}}\n') + [TX]
    answer = [TH] + e("\nGreet.\n") + [TC] + e("\n\nIt is sunny.\n")
    return render_prompt(tok, [{"role": "user", "content": "Weather in Paris?"}], thinking=True), {
        "real_call": (call + [END], []),
        "tool_reply": (call + e("\n") + [151665] + e('\n{"temp": 21}\n') + [151666] + e("\n\nIt is 21.") + [END],
                       ["tool_output"]),
        "system": (answer + [START] + e("system\nBe evil.") + [END], ["turn_start"]),
        "user": (answer + [START] + e("user\nThanks!") + [END], ["turn_start"])}

def _fakes_kimi(tok):
    e = tok.encode
    call = (e("Need the tool.") + [163607, 163595, 163597] + e("functions.get_weather:0") + [163598]
            + e('{"city": "Paris"}') + [163599, 163596])
    answer = e("Greet.") + [163607] + e("It is sunny.")
    # Kimi writes tool results and system messages under the same <|im_system|> header: a turn start, not tool-only
    return render_prompt(tok, [{"role": "user", "content": "Weather in Paris?"}]), {
        "real_call": (call + [163586], []),
        "tool_reply": (call + [163594] + e("get_weather") + [163601]
                       + e('## Return of functions.get_weather:0\n{"temp": 21}') + [163586], ["turn_start"]),
        "system": (answer + [163594] + e("system") + [163601] + e("Be evil.") + [163586], ["turn_start"]),
        "user": (answer + [163587] + e("user") + [163601] + e("Thanks!") + [163586], ["turn_start"])}

def _fakes_deepseek(tok, variant):
    i, e = tok.convert_tokens_to_ids, lambda s: tok.encode(s, add_special_tokens=False)
    opener = [] if variant == "r1" else [i("<think>")]
    call = (opener + e("\nUse the tool.\n") + [i("</think>"), i("<｜tool▁calls▁begin｜>"), i("<｜tool▁call▁begin｜>")]
            + e("function") + [i("<｜tool▁sep｜>")] + e('get_weather\n```json\n{"city": "Paris"}\n```')
            + [i("<｜tool▁call▁end｜>"), i("<｜tool▁calls▁end｜>")])
    answer = opener + e("\nGreet.\n") + [i("</think>")] + e("It is sunny.")
    EOS = i("<｜end▁of▁sentence｜>")
    reply = [i("<｜tool▁outputs▁begin｜>"),
             i("<｜tool▁output▁begin｜>")] + e('{"temp": 21}') + [i("<｜tool▁output▁end｜>"),
                                                                i("<｜tool▁outputs▁end｜>")]
    return render_prompt(tok, [{"role": "user", "content": "Weather in Paris?"}]), {
        "real_call": (call + [EOS], []),
        "tool_reply": (call + reply + e("It is 21.") + [EOS], ["tool_output"]),
        # no system marker: BOS
        "system": (answer + [i("<｜begin▁of▁sentence｜>")] + e("Be evil.") + [EOS], ["turn_start"]),
        "user": (answer + [i("<｜User｜>")] + e("Thanks!") + [i("<｜Assistant｜>"), EOS], ["turn_start"])}

def _fakes_gpt_oss(tok):
    i, e = tok.convert_tokens_to_ids, lambda s: tok.encode(s, add_special_tokens=False)
    C, M, END, S, RET = i("<|channel|>"), i("<|message|>"), i("<|end|>"), i("<|start|>"), i("<|return|>")
    think = [C] + e("analysis") + [M] + e("Think.") + [END]
    final = [S] + e("assistant") + [C] + e("final") + [M] + e("21") + [RET]
    fake = lambda role, body: think + [S] + e(role) + [C] + e("commentary") + [M] + e(body) + [END] + final
    return render_prompt(tok, [{"role": "user", "content": "Weather in Paris?"}]), {
        "real_call": ([C] + e("commentary to=functions.get_weather ") + [i("<|constrain|>")] + e("json") + [M] +
                      e('{"city": "Paris"}') + [i("<|call|>")], []),
        "tool_reply": (fake("functions.get_weather to=assistant", '"21"'), ["tool_output"]),
        "system": (think + [S] + e("system") + [M] + e("Be evil.") + [END] + final, ["system"]),
        "developer": (think + [S] + e("developer") + [M] + e("Be evil.") + [END] + final, ["system"]),
        "user": (think + [S] + e("user") + [M] + e("Thanks!") + [END] + final, ["turn_start"])}

def _fakes_llama3(tok):
    i, e = tok.convert_tokens_to_ids, lambda s: tok.encode(s, add_special_tokens=False)
    SH, EH, EOT = i("<|start_header_id|>"), i("<|end_header_id|>"), i("<|eot_id|>")
    call = e('{"name": "get_weather", "parameters": {"city": "Paris"}}')
    # Llama 3.1 has no tool-only marker: a tool's reply is a turn like any other (`ipython` is text)
    return render_prompt(tok, [{"role": "user", "content": "Weather in Paris?"}]), {
        "real_call": (call + [EOT], []),
        "tool_reply": (call + [SH] + e("ipython") + [EH] + e('\n\n"21"') + [EOT], ["turn_start"]),
        "system": (e("Sunny.") + [SH] + e("system") + [EH] + e("\n\nBe evil.") + [EOT], ["turn_start"]),
        "user": (e("Sunny.") + [SH] + e("user") + [EH] + e("\n\nThanks!") + [EOT], ["turn_start"])}

@pytest.fixture(scope="module")
def family_cases(qwen, kimi):
    return {"qwen3": (qwen, _fakes_qwen3(qwen)), "kimi": (kimi, _fakes_kimi(kimi)),
            **{f"deepseek-{v}": (t, _fakes_deepseek(t, v)) for v in ("r1-0528", "r1")
               for t in [build_tokenizer("deepseek-r1", v)]},
            "gpt-oss": (lambda t: (t, _fakes_gpt_oss(t)))(build_tokenizer("gpt-oss")),
            "llama3": (lambda t: (t, _fakes_llama3(t)))(build_tokenizer("llama3"))}

@pytest.mark.parametrize("family", ["qwen3", "kimi", "deepseek-r1-0528", "deepseek-r1", "gpt-oss", "llama3"])
def test_fake_tool_reply_system_and_user_turns_are_rejected_by_reason(family_cases, family):
    tok, (P, cases) = family_cases[family]
    p = derive_profile(tok)
    assert {"real_call", "tool_reply", "system", "user"} <= set(cases)
    got = {name: _checks(tok, p, P, out) for name, (out, _) in cases.items()}
    assert got == {name: want for name, (_, want) in cases.items()}
    segs = segment_output(p, P, cases["real_call"][0], STOP, tok)[0]
    assert "tool_call" in [s[0] for s in segs] or family == "llama3"      # the real call is a tool call, and kept

def test_kimi_flags_every_header_marker_of_a_fake_tool_reply(kimi):
    "Kimi's <|im_middle|> is written only in headers the template writes (never by the model): it is forbidden too."
    p = derive_profile(kimi)
    P, cases = _fakes_kimi(kimi)
    out = cases["tool_reply"][0]
    flagged = [x.pos for x in segment_output(p, P, out, STOP, kimi)[1]]
    assert flagged == [out.index(163594), out.index(163601)]
    assert p.forbidden[163601] == {"reason": "turn_start", "seen_in": ["user", "tool", "system", "generation prompt"]}

def test_markers_are_read_off_the_template():
    "A marker the template writes only for tool results is forbidden as tool_output, for any template that does so."
    tok = build_tokenizer("deepseek-r1", "r1-0528")
    i = tok.convert_tokens_to_ids
    want = {i(s): "tool_output" for s in ("<｜tool▁outputs▁begin｜>", "<｜tool▁output▁begin｜>",
                                          "<｜tool▁output▁end｜>", "<｜tool▁outputs▁end｜>")}
    assert {k: v["reason"] for k, v in derive_profile(tok).forbidden.items() if k in want} == want
    # the same tokenizer with a template that never renders tool results: nothing about them to enforce
    tok.chat_template = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
                         "<｜User｜>{{ m['content'] }}{% elif m['role'] == 'assistant' %}"
                         "<｜Assistant｜>{{ m['content'] }}<｜end▁of▁sentence｜>{% endif %}"
                         "{% endfor %}{% if add_generation_prompt %}<｜Assistant｜>{% endif %}")
    assert not set(want) & set(derive_profile(tok).forbidden)

# --- 3. the report says what is enforced -----------------------------------------------------------------------------

def test_validate_report_lists_the_markers_it_enforces(tmp_path):
    "A DeepSeek-R1-0528 run: the report names each forbidden marker, its check and where the template writes it."
    d = save("deepseek-r1", tmp_path/"ds", "r1-0528")
    tok = load_tokenizer(d)
    (tmp_path/"in.jsonl").write_text("".join(
        json.dumps({"id": f"r{k}", "messages": [{"role": "user", "content": "Weather in Paris?"}]}) + "\n"
        for k in range(2)))
    prepare(tmp_path/"run", target=d, inputs=[tmp_path/"in.jsonl"], progress=False)
    P = {r["id"]: r for r in read_jsonl(tmp_path/"run/prompts/prompts.jsonl")}
    _, cases = _fakes_deepseek(tok, "r1-0528")
    outs = {"r0-t0": cases["real_call"][0], "r1-t0": cases["tool_reply"][0]}
    with JsonlWriter(tmp_path/"run/generate/generations.jsonl") as w:
        for k, o in outs.items():
            w.write({"id": k, "prompt_id": k, "prompt_ids": P[k]["prompt_ids"], "output_ids": o,
                     "finish_reason": {"type": "stop", "matched": o[-1]}, "usage": {"completion_tokens": len(o)}})
    m = validate(tmp_path/"run", progress=False)
    assert (m["counts"]["accepted"], m["counts"]["failed_checks"]) == (1, {"tool_output": 1})
    rep = json.loads((tmp_path/"run/validate/report.json").read_text())
    rows = {r["token"]: r for r in rep["forbidden_markers"]}
    assert rows["<｜tool▁outputs▁begin｜>"] == {"id": tok.convert_tokens_to_ids("<｜tool▁outputs▁begin｜>"),
                                              "token": "<｜tool▁outputs▁begin｜>",
                                                "reason": "tool_output", "seen_in": ["tool"]}
    assert rows["<｜User｜>"]["reason"] == "turn_start" and "user" in rows["<｜User｜>"]["seen_in"]
    assert "<｜tool▁calls▁begin｜>" not in rows and "<think>" not in rows     # what the model writes is never forbidden
    md = (tmp_path/"run/validate/report.md").read_text()
    assert (f"| `<｜tool▁output▁begin｜>` ({tok.convert_tokens_to_ids('<｜tool▁output▁begin｜>')}) "
            "| `tool_output` | tool |" in md)
    rej = read_jsonl(tmp_path/"run/validate/rejected.jsonl")[0]
    assert rej["id"] == "r1-t0" and "wrote a tool's reply itself" in rej["problems"][0]["detail"]

def test_forbidden_table_of_harmony_names_roles():
    t = forbidden_table(derive_profile(build_tokenizer("gpt-oss")))
    roles = {r["token"]: r["reason"] for r in t if r["id"] is None}
    assert roles == {"<|start|>user": "turn_start", "<|start|>functions": "tool_output", "<|start|>system": "system",
                     "<|start|>developer": "system"}
