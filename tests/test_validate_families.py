("Validation for families without tokenizer files here: small tokenizers that carry their real token "
 "strings and templates.")
import pytest
from family_tokenizers import build_tokenizer
from eagle3nb.prompts import render_prompt
from eagle3nb.templates import derive_profile, detect_family
from eagle3nb.segment import segment_output, loss_mask_from_segments

STOP = {"type": "stop"}

def _ck(tok, p, prompt, out, finish=STOP):
    segs, probs = segment_output(p, prompt, out, finish, tok)
    return [s[0] for s in segs], sorted({x.check for x in probs})

@pytest.mark.parametrize("variant", ["r1-0528", "r1"])
def test_deepseek_r1_both_prompt_styles(variant):
    tok = build_tokenizer("deepseek-r1", variant)
    p = derive_profile(tok)
    assert detect_family(tok) == "deepseek-r1"
    i = lambda s: tok.convert_tokens_to_ids(s)
    e = lambda s: tok.encode(s, add_special_tokens=False)
    TH, TC, EOS = i("<think>"), i("</think>"), i("<｜end▁of▁sentence｜>")
    P = render_prompt(tok, [{"role": "user", "content": "2+2?"}])
    forced = variant == "r1"                      # the older template puts <think>\n into the prompt
    assert (P[-2:] == [TH] + e("\n")) == forced or P[-1] == TH
    opener = [] if forced else [TH]               # R1-0528: the model opens <think> itself
    good = opener + e("\nTwo and two.\n") + [TC] + e("\n\nFour.") + [EOS]
    assert _ck(tok, p, P, good) == (["reasoning", "answer", "end"], [])
    assert _ck(tok, p, P, good[:-1] + [i("<｜User｜>"), EOS])[1] == ["end", "turn_start"] or \
           _ck(tok, p, P, good[:-1] + [i("<｜User｜>"), EOS])[1] == ["turn_start"]
    assert _ck(tok, p, P, [TH] + good)[1] == ["reasoning"]                     # one <think> too many
    calls = [i("<｜tool▁calls▁begin｜>"), i("<｜tool▁call▁begin｜>")] + e("function") + [i("<｜tool▁sep｜>")] + \
            e('get_weather\n```json\n{"city": "Paris"}\n```') + [i("<｜tool▁call▁end｜>"), i("<｜tool▁calls▁end｜>")]
    tool = opener + e("\nUse the tool.\n") + [TC] + calls + [EOS]
    assert _ck(tok, p, P, tool) == (["reasoning", "answer", "tool_call", "end"], []) or _ck(tok, p, P, tool)[1] == []
    swapped = tool[:]
    a, b = swapped.index(i("<｜tool▁sep｜>")), swapped.index(i("<｜tool▁call▁begin｜>"))
    swapped[a], swapped[b] = swapped[b], swapped[a]
    assert _ck(tok, p, P, swapped)[1] == ["tool_calls"]

def test_gpt_oss_harmony():
    tok = build_tokenizer("gpt-oss")
    p = derive_profile(tok)
    assert detect_family(tok) == "gpt-oss"
    h = p.harmony
    e = lambda s: tok.encode(s, add_special_tokens=False)
    P = render_prompt(tok, [{"role": "user", "content": "2+2?"}])
    assert P[-1] != h["channel"] and tok.decode(P).endswith("<|start|>assistant")
    good = ([h["channel"]] + e("analysis") + [h["message"]] + e("Simple sum.") + [h["end"], h["start"]]
            + e("assistant") + [h["channel"]] + e("final") + [h["message"]] + e("4") + [h["return"]])
    kinds, probs = _ck(tok, p, P, good)
    assert probs == [] and kinds == ["reasoning", "header", "answer", "end"]
    segs = segment_output(p, P, good, STOP, tok)[0]
    mask = loss_mask_from_segments(len(P), segs, len(good))
    assert mask == [0] * len(P) + [1] * len(good)    # the model generates <|start|>assistant: the drafter must draft it
    hs, he = next((s, e) for k, s, e in segs if k == "header")
    assert tok.decode(good[hs:he]) == "<|start|>assistant" and all(mask[len(P) + t] for t in range(hs, he))
    call = ([h["channel"]] + e("commentary to=functions.get_weather ") + [h["constrain"]] + e("json") + [h["message"]]
            + e('{"city": "Paris"}') + [h["call"]])
    kinds, probs = _ck(tok, p, P, call)
    assert probs == [] and kinds == ["tool_call", "end"]
    fake_user = good[:-1] + [h["end"], h["start"]] + e("user") + [h["message"]] + e("more")
    assert "turn_start" in _ck(tok, p, P, fake_user)[1]
    wrong_end = good[:-1] + [h["call"]]                                           # a final answer ended by <|call|>
    assert _ck(tok, p, P, wrong_end)[1] == ["tool_calls"]
    assert _ck(tok, p, P, good[:6], {"type": "length"})[1] == ["truncated"]

def test_llama3():
    tok = build_tokenizer("llama3")
    p = derive_profile(tok)
    assert detect_family(tok) == "llama3" and p.think_open is None
    i = lambda s: tok.convert_tokens_to_ids(s)
    e = lambda s: tok.encode(s, add_special_tokens=False)
    P = render_prompt(tok, [{"role": "user", "content": "Hi"}])
    assert tok.decode(P).endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert _ck(tok, p, P, e("Hello!") + [i("<|eot_id|>")]) == (["answer", "end"], [])
    assert _ck(tok, p, P, e("Hello!") + [i("<|start_header_id|>")] + e("user") + [i("<|eot_id|>")])[1] == ["turn_start"]
    assert _ck(tok, p, P, e("Hello!") + [i("<|eot_id|>")] + e("x") + [i("<|eot_id|>")])[1] == ["end"]
    assert _ck(tok, p, P, e("Hello!"), STOP)[1] == ["end"]                      # stopped on a non-end token
