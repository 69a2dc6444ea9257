"Self-test of tests/family_tokenizers.py: real special-token strings and chat templates over a tiny byte-level BPE."
import json, random, time
import pytest
import transformers  # noqa: F401  (imported up front so build timings below exclude it)
from family_tokenizers import FAMILIES, TOKENS, build_tokenizer, save, chat_template

CASES = [(f, v) for f, vs in FAMILIES.items() for v in vs]
ONE = [{"role": "user", "content": "What is 2+2?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                         "required": ["city"]}}}]
ENDS = {("deepseek-r1", "r1-0528"): "<｜Assistant｜>", ("deepseek-r1", "r1"): "<｜Assistant｜><think>\n",
        ("gpt-oss", None): "<|start|>assistant", ("llama3", None): "<|start_header_id|>assistant<|end_header_id|>\n\n"}

@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def case(request):
    f, v = request.param
    return f, v, build_tokenizer(f, v), None

def render(tok, msgs, **kw):
    return tok.apply_chat_template(msgs, add_generation_prompt=kw.pop("add_generation_prompt", True),
                                   tokenize=False, **kw)

def assert_single_ids(f, tok, text):
    "Every family token in `text` is one id, no other id spells one, and the ids decode back to `text`."
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    for t in TOKENS[f]:
        assert ids.count(tok.convert_tokens_to_ids(t)) == text.count(t), t
    return ids

def test_small_fast_and_every_token_one_id(case):
    f, v, tok, _ = case
    t0 = time.perf_counter()
    build_tokenizer(f, v)
    assert time.perf_counter() - t0 < 0.2 and len(tok) < 700
    for t in TOKENS[f]:
        ids = tok.encode(t, add_special_tokens=False)
        assert len(ids) == 1 and ids == [tok.convert_tokens_to_ids(t)] and tok.convert_ids_to_tokens(ids[0]) == t
    assert len({tok.convert_tokens_to_ids(t) for t in TOKENS[f]}) == len(TOKENS[f])

def test_bos_eos_pad_as_the_real_configs(case):
    f, v, tok, _ = case
    want = {"deepseek-r1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
            "gpt-oss": ("<|startoftext|>", "<|return|>", "<|endoftext|>"),
            "llama3": ("<|begin_of_text|>", "<|eot_id|>", None)}[f]
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == want
    bos_added = tok.encode("hi")[0] == tok.bos_token_id
    assert bos_added == (f != "gpt-oss")                   # DeepSeek and Llama-3 post-processors prepend BOS

def test_lossless_on_arbitrary_utf8(case):
    f, v, tok, _ = case
    rng = random.Random(0)
    texts = ["Hello 世界 🙂🚀 naïve café\n\n\t  x  ", "中文、日本語、한국어 — emoji 👩‍👩‍👧 ZWJ",
             "\x00\x7f\r\n\u2028 \ufeff",
             " ".join(TOKENS[f]) + " <think>x</think> <|im_end|>"]
    texts += ["".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x800), rng.randrange(0x4e00, 0x9fff),
                                      rng.randrange(0x1f300, 0x1faff)])) for _ in range(200)) for _ in range(20)]
    for s in texts:
        assert tok.decode(tok.encode(s, add_special_tokens=False)) == s

def test_generation_prompt_endings(case):
    f, v, tok, _ = case
    r = render(tok, ONE)
    assert r.endswith(ENDS[f, v])
    ids = assert_single_ids(f, tok, r)
    if f == "deepseek-r1":
        assert r.startswith("<｜begin▁of▁sentence｜><｜User｜>What is 2+2?")
        assert ids.count(tok.convert_tokens_to_ids("<｜Assistant｜>")) == 1
        tail = ["<｜Assistant｜>"] if v == "r1-0528" else ["<｜Assistant｜>", "<think>"]
        n = len(tail)
        assert ids[len(ids) - n - (v == "r1"):len(ids) - (v == "r1")] == tok.convert_tokens_to_ids(tail)
    elif f == "gpt-oss":
        assert r.startswith("<|start|>system<|message|>You are ChatGPT") and "Reasoning: medium" in r
        tail = [tok.convert_tokens_to_ids("<|start|>")] + tok.encode("assistant", add_special_tokens=False)
        assert ids[-len(tail):] == tail
        assert "Reasoning: high" in render(tok, ONE, reasoning_effort="high")
    else:
        assert r.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
                            "December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>")
        assert ids.count(tok.convert_tokens_to_ids("<|start_header_id|>")) == 3

def test_two_turns_with_reasoning(case):
    f, v, tok, _ = case
    sysm, u1, u2 = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                    {"role": "user", "content": "2+2?"})
    if f == "deepseek-r1":   # reasoning lives in content; the templates drop it from history
        a = {"role": "assistant", "content": "<think>\nuser greets\n</think>\n\nHello!"}
        r = render(tok, [sysm, u1, a, u2])
        assert r == ("<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜>\n\nHello!"
                     "<｜end▁of▁sentence｜><｜User｜>2+2?" + ENDS[f, v])
    elif f == "gpt-oss":     # harmony: `thinking` -> analysis channel, only for a final assistant turn in training
        a = {"role": "assistant", "content": "Hello!", "thinking": "user greets"}
        r = render(tok, [sysm, u1, a, u2])
        assert "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>" in r and "user greets" not in r
        assert ("<|start|>assistant<|channel|>final<|message|>Hello!<|end|>"
                "<|start|>user<|message|>2+2?<|end|><|start|>assistant" in r)
        train = render(tok, [sysm, u1, a], add_generation_prompt=False)
        assert train.endswith("<|start|>assistant<|channel|>analysis<|message|>user greets<|end|>"
                              "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>")
        assert_single_ids(f, tok, train)
    else:                    # no reasoning in Llama-3.1's template
        a = {"role": "assistant", "content": "Hello!"}
        r = render(tok, [sysm, u1, a, u2])
        assert ("Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>" in r)
    assert r.endswith(ENDS[f, v])
    assert_single_ids(f, tok, r)

def test_tools(case):
    f, v, tok, _ = case
    u = {"role": "user", "content": "Weather in Paris?"}
    if f == "deepseek-r1":   # arguments are a JSON string in DeepSeek's templates
        call = {"type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}
        msgs = [u, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": '{"temp": 21}'}]
        r = render(tok, msgs, tools=TOOLS)
        assert ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                "get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
                "<｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>"
                "{\"temp\": 21}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>") in r
        r2 = render(tok, msgs + [{"role": "assistant", "content": "21 degrees."},
                                 {"role": "user", "content": "Thanks"}])
        assert r2.endswith(ENDS[f, v])
        assert_single_ids(f, tok, r2)
    else:
        call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
        msgs = [u, {"role": "assistant", "tool_calls": [call]}, {"role": "tool", "content": '{"temp": 21}'}]
        r = render(tok, msgs, tools=TOOLS)
        if f == "gpt-oss":
            assert ("<|start|>developer<|message|># Tools\n\n## functions\n\n"
                    "namespace functions {\n\n// Weather for a city\n" in r)
            assert ('<|start|>assistant to=functions.get_weather<|channel|>commentary json'
                    '<|message|>{"city": "Paris"}<|call|>' in r)
            assert r.endswith(ENDS[f, v])
        else:
            assert ("<|start_header_id|>system<|end_header_id|>\n\n"
                    "Environment: ipython\nCutting Knowledge Date: December 2023" in r)
            assert ('<|start_header_id|>assistant<|end_header_id|>\n\n'
                    '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>' in r)
            assert r.endswith(ENDS[f, v])
    assert_single_ids(f, tok, r)

def test_skip_special_tokens_follows_the_real_flags():
    ds = build_tokenizer("deepseek-r1")
    ids = ds.encode("<｜User｜>hi<｜Assistant｜><think>\nx\n</think>\n\ny<｜end▁of▁sentence｜>",
                    add_special_tokens=False)
    assert ds.decode(ids, skip_special_tokens=True) == "<｜User｜>hi<｜Assistant｜><think>\nx\n</think>\n\ny"
    oss = build_tokenizer("gpt-oss")
    ids = oss.encode("<|channel|>final<|message|>y<|return|>", add_special_tokens=False)
    assert oss.decode(ids, skip_special_tokens=True) == "finaly"

def test_templates_match_their_published_examples():
    "huggingface.js packages/jinja/test/e2e.test.js: the expected outputs for Llama-3.1 and (January) DeepSeek-R1."
    from transformers.utils.chat_template_utils import render_jinja_template
    tool = {"type": "function", "function": {"name": "get_current_temperature",
                                             "description": "Get the current temperature at a location.",
            "parameters": {"type": "object", "properties": {"location": {"type": "string",
                "description": 'The location to get the temperature for, in the format "City, Country"'}},
                "required": ["location"]},
            "return": {"type": "number", "description": "The current temperature at the specified location in the "
                                                        "specified units, as a float."}}}
    llama = build_tokenizer("llama3")
    got = llama.apply_chat_template([{"role": "system", "content": "You are a bot that responds to weather queries."},
                                     {"role": "user", "content": "Hey, what's the temperature in Paris right now?"}],
                                    tools=[tool], add_generation_prompt=True, tokenize=False)
    assert got == ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                   "Environment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
                   "You are a bot that responds to weather queries.<|eot_id|><|start_header_id|>user<|end_header_id|>"
                   "\n\nGiven the following functions, please respond with a JSON for a function call with its "
                   "proper arguments that best answers the given prompt.\n\nRespond in the format "
                   '{"name": function name, "parameters": dictionary of argument name and its value}.'
                   "Do not use variables.\n\n"
                   + json.dumps(tool, indent=4) + "\n\nHey, what's the temperature in Paris right now?<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n")
    jan = chat_template("deepseek-r1", "r1").replace("{{'<｜Assistant｜><think>\\n'}}", "{{'<｜Assistant｜>'}}")
    assert jan != chat_template("deepseek-r1", "r1")
    out, _ = render_jinja_template(
        conversations=[[{"role": "user", "content": "Hi there."},
                        {"role": "assistant", "content": '<think>The user said "Hi there."</think>Hi!'},
                        {"role": "user", "content": "Tell me a joke."}]],
        chat_template=jan, add_generation_prompt=True,
        bos_token="<｜begin▁of▁sentence｜>", eos_token="<｜end▁of▁sentence｜>")
    assert out[0] == ("<｜begin▁of▁sentence｜><｜User｜>Hi there.<｜Assistant｜>Hi!<｜end▁of▁sentence｜>"
                      "<｜User｜>Tell me a joke.<｜Assistant｜>")

@pytest.mark.parametrize("f,v", CASES)
def test_save_loads_with_autotokenizer(f, v, tmp_path):
    from transformers import AutoTokenizer
    from eagle3nb.models import load_tokenizer
    d = save(f, tmp_path/"m", v)
    cfg = json.loads((d/"config.json").read_text())
    tok, ref = AutoTokenizer.from_pretrained(d, local_files_only=True), build_tokenizer(f, v)
    assert cfg["vocab_size"] == len(tok) == len(ref) and cfg["model_type"] in ("deepseek_v3", "gpt_oss", "llama")
    assert cfg["bos_token_id"] == ref.bos_token_id
    assert tok.chat_template == ref.chat_template == chat_template(f, v)
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == (ref.bos_token, ref.eos_token, ref.pad_token)
    r = render(ref, ONE)
    assert render(tok, ONE) == r and tok.encode(r) == ref.encode(r)
    assert tok.convert_tokens_to_ids(list(TOKENS[f])) == ref.convert_tokens_to_ids(list(TOKENS[f]))
    assert load_tokenizer(d).encode(r, add_special_tokens=False) == ref.encode(r, add_special_tokens=False)

def test_unknown_names_fail_loudly():
    with pytest.raises(ValueError): build_tokenizer("qwen3")
    with pytest.raises(ValueError): build_tokenizer("deepseek-r1", "v3")
    assert build_tokenizer("deepseek-r1").chat_template == chat_template("deepseek-r1", "r1-0528")
