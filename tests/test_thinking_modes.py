"""Mixed reasoning modes on the real Qwen3 template (`[data] thinking_share`): each conversation's mode is hashed from
its id and recorded on its prompt, the two modes render different prompts, and the evaluation's per-prompt lines carry
the mode so the report can compare the drafter with n-gram on each mode's prompts alone (`acceptance_by_mode`). The
target is the tiny Qwen3-shaped model over the real Qwen3 tokenizer; the drafter a quick fit on it."""
from quick_drafter import fit_drafter
from eagle3nb.evaluate import _lines
from eagle3nb.kinds import acceptance_by_mode
from eagle3nb.models import eos_ids
from eagle3nb.power import choose_k
from eagle3nb.prompts import render_prompt, thinking_mode
from eagle3nb.replay import greedy_runs, replay_prompts

QUESTIONS = ["What is two plus two?", "Name a colour of the sky.", "Count from one to five.", "Why do cats purr?",
             "Say hello in French.", "What is the capital of Italy?", "Spell the word cat.", "Is ice cold?",
             "How many legs has a spider?", "What comes after Monday?", "Name a fruit.", "What is water made of?"]

def test_mixed_modes_on_the_qwen3_template():
    d, eng, _, _ = fit_drafter("tiny-qwen3", steps=50)   # the session's tiny-qwen3 fit (test_evaluate's)
    tok = eng.target.tokenizer
    recs = []
    for i, q in enumerate(QUESTIONS):
        conv = f"conv{i}"
        mode = thinking_mode(None, 0.5, conv)
        ids = render_prompt(tok, [{"role": "user", "content": q}], None, mode)
        recs.append({"id": f"{conv}-t0", "prompt_ids": ids, "conversation": conv, "options": {"thinking": mode}})
    modes = [r["options"]["thinking"] for r in recs]
    assert True in modes and False in modes, modes                       # a hashed share: both modes drawn
    assert modes == [thinking_mode(None, 0.5, f"conv{i}") for i in range(len(QUESTIONS))]   # and drawn again alike
    empty_think = tok.encode("<think>\n\n</think>\n\n", add_special_tokens=False)
    for r in recs:   # Qwen3's switch: with thinking off the template closes an empty reasoning block in the prompt
        tail = r["prompt_ids"][-len(empty_think):]
        assert (tail == empty_think) == (r["options"]["thinking"] is False), tok.decode(r["prompt_ids"][-12:])
    eos = eos_ids(eng.target.path, tok)
    runs = greedy_runs(eng.model, [r["prompt_ids"] for r in recs], 16, eos, 4, d.config.aux_layers_hf, 4, eng)
    per = replay_prompts(eng.model, d, [(r["id"], r["prompt_ids"]) for r in recs], runs, [1, 2, 3], [1, 2, 3, 4])
    lines = _lines(per, recs, "heldout", {"eagle3": "eagle3", "ngram": "ngram2-4"}, {}, None, None)
    assert [q["thinking"] for q in lines] == modes
    ks = {m: choose_k(lines, m) for m in ("eagle3", "ngram")}
    by = acceptance_by_mode(lines, ks, 16, resamples=200)
    assert by["on"]["n_prompts"] + by["off"]["n_prompts"] == len(QUESTIONS)
    assert by["on"]["n_prompts"] == modes.count(True)
    for m in ("on", "off"):
        assert by[m]["k"] == ks and set(by[m]["tokens_per_forward"]) == {"eagle3", "ngram"}
        lo, hi = by[m]["ci95"]["ratio"]
        assert lo <= by[m]["ratio"] <= hi
    assert acceptance_by_mode([q for q in lines if q["thinking"]], ks, 16) is None   # one mode: no split
