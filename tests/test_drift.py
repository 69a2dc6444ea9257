"The drift proof (nbs/06a_drift.ipynb) on both real tokenizers in ../shared/tokenizers: Qwen3 and Kimi K2.5, 100 samples each, seed 0."
import shutil
from pathlib import Path
import pytest
import eagle3nb.drift as drift
from eagle3nb.drift import added_ids, compare, drift_table, realistic_outputs, special_ids, KINDS, MARKERS
from eagle3nb.models import KimiTokenizer, load_tokenizer
from eagle3nb.prompts import render_prompt

TOKS = Path(__file__).parents[1].parent/"shared/tokenizers"
N = 100                                     # 25 kinds x 4 per family

@pytest.fixture(scope="module")
def qwen():
    return load_tokenizer(TOKS/"qwen3")

@pytest.fixture(scope="module")
def kimi(tmp_path_factory):
    d = tmp_path_factory.mktemp("kimi-k2")
    for f in ("tiktoken.model", "tokenizer_config.json", "chat_template.jinja"): shutil.copy(TOKS/"kimi-k2"/f, d/f)
    tok = load_tokenizer(d)
    assert isinstance(tok, KimiTokenizer)
    return tok

_items = {}
def items(tok):
    if id(tok) not in _items: _items[id(tok)] = realistic_outputs(tok, n=N, seed=0)
    return _items[id(tok)]

def table(tok, server="sglang", template_kwargs=None, skip_ids=None):
    rows = drift_table(items(tok), tok, server, template_kwargs, skip_ids)
    return {r["kind"]: r for r in rows}

def counts(t, key="differ_core"): return {k: r[key] for k, r in t.items() if k != "ALL"}

def test_module_needs_no_shared_files():
    src = Path(drift.__file__).read_text()
    assert "/work" not in src and "shared/tokenizers" not in src

@pytest.mark.parametrize("name", ["qwen", "kimi"])
def test_token_direct_is_what_the_engine_produced(name, request):
    tok = request.getfixturevalue(name)
    its = items(tok)
    fam = {"qwen": "qwen3", "kimi": "kimi"}[name]
    assert [it["kind"] for it in its[:25]] == KINDS[fam] and len(its) == N
    eot = tok.convert_tokens_to_ids(MARKERS[fam]["eot"])
    for it in its:
        assert it["prompt_ids"] == render_prompt(tok, it["prompt_messages"], it["tools"], thinking=True)
        assert (it["output_ids"][-1] == eot) == (it["finish_reason"]["type"] == "stop")
        r = compare(tok, it)
        assert r["direct_ids"] == it["prompt_ids"] + it["output_ids"]
        if r["differ"]: assert r["text_ids"] != r["direct_ids"]
        if not r["canonical"]: assert r["differ_core"]          # a non-canonical output never survives
        if r["truncated"]: assert r["fake_eot"]                 # a truncated one always gets an end of turn

# ---------------------------------------------------------------------------------------------- Qwen3
QWEN_AGREE_BUT_TAIL = {"plain", "answer_leading_space", "answer_trailing_ws", "code_block", "non_ascii", "empty_think",
                       "tool_call", "tool_key_order", "tool_numbers_plain", "tool_multi", "multistep_final", "multistep_tool"}

def test_qwen3_sglang(qwen):
    t = table(qwen)
    A = t["ALL"]
    assert (A["samples"], A["noncanon"], A["differ"], A["differ_core"], A["range"], A["truncated"], A["fake_eot"]) == \
           (100, 12, 100, 52, "1..458", 16, 16)
    assert counts(t, "differ") == {k: 4 for k in KINDS["qwen3"]}                   # every sample: the template's "\n"
    assert counts(t) == {k: 0 if k in QWEN_AGREE_BUT_TAIL else 4 for k in KINDS["qwen3"]}
    for k in QWEN_AGREE_BUT_TAIL: assert t[k]["window"].endswith("<|im_end|>] ⟂ direct [] / text [\\n]"), k
    assert counts(t, "noncanon") == {k: 4 if k in ("noncanonical_split", "noncanonical_boundary", "truncated_mid_char") else 0
                                     for k in KINDS["qwen3"]}
    w = {k: t[k]["window"] for k in t}
    assert w["reasoning_blank_lines"] == "…[\\n, <think>] ⟂ direct [\\n\\n, Okay, ,] / text [\\n, Okay, ,]"
    assert w["noncanonical_split"].endswith("direct [ vac, a, tion] / text [ vacation, !\\n, Dragon]")
    assert w["noncanonical_boundary"].endswith("direct [., \\n, </think>] / text [.\\n, </think>, \\n\\n]")
    assert w["tool_unicode_escape"] == '…[Kr, ak] ⟂ direct [\\\\u, 0, 0] / text [ów, \\"}}\\n, </tool_call>]'
    assert w["tool_outer_key_order"].endswith('direct [arguments, \\":,  {\\"] / text [name, \\":,  \\"]')
    assert w["tool_preamble"].endswith("direct [.\\n\\n, <tool_call>, \\n] / text [.\\n, <tool_call>, \\n]")
    assert w["truncated_reasoning"].endswith("direct [] / text [\\n, </think>, \\n\\n]")         # a fake </think> too
    assert w["truncated_answer"].endswith("direct [] / text [<|im_end|>, \\n]")
    assert w["truncated_tool_call"].endswith('direct [<tool_call>, \\n, {\\"] / text [<|im_end|>, \\n]')  # the call is lost
    assert w["truncated_mid_char"] == "…[ |\\n, |] ⟂ direct [ �#11162] / text [ �#29333, <|im_end|>, \\n]"

def test_qwen3_other_servers(qwen):
    base = counts(table(qwen))
    for server, total, newly in [("sglang_legacy", 60, {"answer_leading_space", "answer_trailing_ws"}),
                                 ("vllm", 72, {"tool_call", "tool_key_order", "tool_numbers_plain", "tool_multi", "multistep_tool"})]:
        t = table(qwen, server)
        assert (t["ALL"]["differ"], t["ALL"]["differ_core"], t["ALL"]["fake_eot"]) == (100, total, 16), server
        assert {k for k, v in counts(t).items() if v > base[k]} == newly, server
    legacy, vllm = table(qwen, "sglang_legacy"), table(qwen, "vllm")
    assert legacy["answer_leading_space"]["window"].endswith("direct [ As,  a,  demand] / text [As,  a,  demand]")
    assert legacy["answer_trailing_ws"]["window"].endswith("direct [.\\n\\n, <|im_end|>] / text [., <|im_end|>, \\n]")
    for k in ("tool_call", "multistep_tool"):   # "\n\n" kept in content, and the template adds one more "\n"
        assert vllm[k]["window"] == "…[.\\n, </think>] ⟂ direct [\\n\\n, <tool_call>, \\n] / text [\\n\\n\\n, <tool_call>, \\n]", k

# ---------------------------------------------------------------------------------------------- Kimi K2.5
KIMI_AGREE = {"empty_think", "tool_call", "tool_key_order", "tool_unicode_escape", "tool_numbers_plain",
              "tool_numbers_exotic", "tool_multi", "tool_preamble"}
KIMI_ANSWERS = {"plain", "reasoning_blank_lines", "answer_leading_newline", "answer_leading_space", "answer_trailing_ws",
                "code_block", "non_ascii"}

def test_kimi_skip_ids_come_from_the_tokenizer(kimi):
    sp = special_ids(kimi)
    names = lambda ids: {kimi.convert_ids_to_tokens(i) for i in ids}
    assert len(sp) == 16 and {"<|im_end|>", "[EOS]", "<|im_middle|>"} <= names(sp)
    kept = {"<think>", "</think>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
            "<|tool_call_argument_begin|>", "<|tool_call_end|>"}
    assert not kept & names(sp)                                  # flagged "special": false, kept by skip_special_tokens
    assert kept <= names(added_ids(kimi)) and len(added_ids(kimi)) == 256
    ids = kimi.encode("Plan.</think>Answer.<|im_end|>")
    assert drift.server_decode(kimi, ids, sp) == "Plan.</think>Answer."
    for it in items(kimi):                                       # the same ids as KimiTokenizer's own skip_special_tokens
        assert drift.server_decode(kimi, it["output_ids"], sp) == kimi.decode(it["output_ids"], skip_special_tokens=True)

def test_kimi_sglang(kimi):
    t = table(kimi)
    A = t["ALL"]
    assert (A["samples"], A["noncanon"], A["differ"], A["differ_core"], A["range"], A["truncated"], A["fake_eot"]) == \
           (100, 12, 67, 67, "-82..50", 16, 16)
    assert counts(t) == counts(t, "differ")                      # Kimi's template writes nothing after <|im_end|>
    assert counts(t) == {k: 0 if k in KIMI_AGREE else 3 if k == "tool_json_spacing" else 4 for k in KINDS["kimi"]}
    for k in KIMI_ANSWERS | {"noncanonical_split", "noncanonical_boundary", "truncated_answer", "truncated_mid_char"}:
        assert t[k]["first_diff"] == 0 and "/ text [</think>," in t[k]["window"], k     # the reasoning is dropped
    assert t["multistep_final"]["first_diff"] == -82                                      # ...even inside the prompt
    assert t["multistep_tool"]["window"] == "…[_time, :] ⟂ direct [1, <|tool_call_ar, {\\\"] / text [2, <|tool_call_ar, {\\\"]"
    assert t["tool_no_think_close"]["window"].endswith("/ text [</think>, <|tool_calls_s, <|tool_call_be]")
    assert t["tool_json_spacing"]["window"].endswith("/ text [</think>, <|im_end|>]")    # multi-line arguments lost

def test_kimi_other_servers_and_builders(kimi):
    tot = lambda **kw: table(kimi, **kw)["ALL"]
    assert tot(server="sglang_legacy")["differ"] == 67
    v = table(kimi, "vllm")
    assert v["ALL"]["differ"] == 100                                     # spaces around every added token (vllm#33457)
    assert v["tool_call"]["window"].endswith("/ text [ , </think>,  ]")
    d = table(kimi, skip_ids=added_ids(kimi))                            # a decoder that drops </think> too
    assert d["ALL"]["differ"] == 71 and d["plain"]["window"].endswith("/ text [</think>, <|im_end|>]")
    p = table(kimi, template_kwargs={"preserve_thinking": True})
    assert p["ALL"]["differ"] == 39 and p["ALL"]["fake_eot"] == 16
    assert {k for k, n in counts(p, "differ").items() if n} == \
           {"empty_think", "noncanonical_split", "noncanonical_boundary", "tool_json_spacing", "truncated_reasoning",
            "truncated_answer", "truncated_tool_call", "truncated_mid_char", "multistep_tool", "tool_no_think_close"}
    assert "/ text [None, </think>, One]" in p["empty_think"]["window"]  # reasoning_content None rendered as "None"
    assert p["noncanonical_split"]["window"].endswith("direct [ vac, a, tion] / text [ vacation, !\\n, Dragon]")
