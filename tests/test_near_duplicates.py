"""The near-duplicate screen on SmolLM2's real template (the embedded default, whose template adds a default system
prompt when none is given): planted copies the old Jaccard rule kept (the same question with 300 pasted tokens added,
the same question under another system prompt) are dropped, and two different short messages, which share nothing
but the template's scaffolding, are not. `screen_sets` counts them in every pair of sets, both ways."""
import pytest
from eagle3nb.heldout import NEAR_THRESHOLD, NearDuplicates, screen_near_duplicates, screen_sets, template_pieces
from eagle3nb.models import load_target
from eagle3nb.prompts import render_prompt

QUESTION = ("My landlord wants to raise the rent by 15 percent when the lease renews in March. I have lived here four "
            "years, always paid on time, and the building has had two long heating outages this winter. How should I "
            "negotiate, what should I put in writing, and is there anything in a typical lease that limits increases?")
PASTE = "\n\n" + " ".join(f"Clause {i}: the tenant shall keep unit {i} clean and report damage within {i + 2} days."
                          for i in range(20))

@pytest.fixture(scope="module")
def tok(): return load_target("smollm2").tokenizer

@pytest.fixture(scope="module")
def pieces(tok): return template_pieces(tok)

def say(tok, *msgs): return render_prompt(tok, [{"role": r, "content": t} for r, t in msgs])

def rec(i, ids): return {"id": f"{i}-t0", "prompt_ids": ids, "conversation": i}

def test_pieces_hold_smollm2s_default_system_prompt(tok, pieces):
    text = [tok.decode(p) for p in pieces]
    assert any("You are a helpful AI assistant named SmolLM" in t for t in text), text
    assert any(t.endswith("<|im_start|>assistant\n") for t in text), text

def test_copy_with_300_tokens_added_is_dropped(tok, pieces):
    ref, copy = say(tok, ("user", QUESTION)), say(tok, ("user", QUESTION + PASTE))
    assert len(copy) - len(ref) >= 300
    kept, dropped = screen_near_duplicates([rec("copy", copy)], [ref], pieces=pieces)
    assert not kept and dropped[0]["containment"] > 0.9, dropped

def test_copy_under_another_system_prompt_is_dropped(tok, pieces):
    ref = say(tok, ("user", QUESTION))   # under SmolLM2's default system prompt
    adviser = "You are a careful tenant-rights adviser. Answer in plain English."
    other = say(tok, ("system", adviser), ("user", QUESTION))
    two = say(tok, ("system", "Reply as a pirate would, with a short joke first."), ("user", QUESTION))
    nd = NearDuplicates([ref], pieces=pieces)
    assert nd.overlap(other)[0] == 1.0 and nd.overlap(two)[0] == 1.0
    assert NearDuplicates([other], pieces=pieces).overlap(two)[0] > NEAR_THRESHOLD   # two system prompts, one question

def test_short_different_messages_are_kept(tok, pieces):
    a, b = say(tok, ("user", "hello")), say(tok, ("user", "What is 2+2?"))
    kept, dropped = screen_near_duplicates([rec("b", b)], [a], pieces=pieces)
    assert kept and not dropped
    c, d = say(tok, ("user", "Tell me a joke")), say(tok, ("user", "Tell me a story"))
    assert NearDuplicates([c], pieces=pieces).overlap(d)[0] == 0.0
    assert NearDuplicates([a], pieces=()).overlap(b)[0] > NEAR_THRESHOLD   # without the template left out: "dropped"

def test_screen_sets_counts_every_pair_both_ways(tok, pieces):
    q, paste = say(tok, ("user", QUESTION)), say(tok, ("user", QUESTION + PASTE))
    s = screen_sets({"training": [rec("t1", say(tok, ("user", "hello")))], "tuning": [rec("u1", paste)],
                     "heldout": [rec("h1", q)], "sealed": [rec("s1", q), rec("s2", say(tok, ("user", "hi")))]}, pieces)
    c = s["counts"]
    assert set(c) == {"training", "tuning", "heldout", "sealed"} and all(len(v) == 3 for v in c.values())
    assert c["tuning"]["heldout"]["near"] == c["heldout"]["tuning"]["near"] == 1
    assert c["sealed"]["heldout"] == {"near": 1, "identical_ids": 1, "same_conversation": 0}
    assert c["heldout"]["sealed"] == {"near": 1, "identical_ids": 1, "same_conversation": 0}
    assert c["training"]["sealed"]["near"] == 0 and c["sealed"]["training"]["near"] == 0
