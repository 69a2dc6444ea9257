"README.md is the front page notebook rendered (nbs/index.ipynb), and the two commands it gives exist."
import importlib.util, re
from conftest import ROOT

def _readme_module():
    spec = importlib.util.spec_from_file_location("readme", ROOT/"scripts/readme.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m

def test_readme_is_the_index_notebook():
    assert (ROOT/"README.md").read_text() == _readme_module().render(), \
        "README.md is out of date: edit nbs/index.ipynb, then run `.venv/bin/python scripts/readme.py`"

def test_readme_two_commands_are_make_targets():
    text, mk = (ROOT/"README.md").read_text(), (ROOT/"Makefile").read_text()
    block = re.search(r"## Two commands.*?```sh\n(.*?)```", text, re.S).group(1)
    cmds = [l.split("#")[0].strip() for l in block.splitlines() if l.strip()]
    assert cmds == ["make run", "make test"]
    for c in cmds: assert re.search(rf"^{c.split()[1]}:", mk, re.M)
    assert "bash scripts/test.sh" in mk and (ROOT/".ci/run").read_text().count("make test") >= 1

def test_readme_links_resolve():
    for target in re.findall(r"\]\((nbs/[^)#]+)\)",
                             (ROOT/"README.md").read_text()): assert (ROOT/target).exists(), target

def test_readme_result_table_is_what_the_result_files_say(monkeypatch):
    "The front page's table, computed again from `nbs/results/`, equals the one the notebook (and README) show."
    import json
    cells = json.loads((ROOT/"nbs/index.ipynb").read_text())["cells"]
    c = next(c for c in cells if "#| echo: false" in "".join(c["source"]) and "results/" in "".join(c["source"]))
    monkeypatch.chdir(ROOT/"nbs")
    ns = {}
    exec("".join(c["source"]), ns)
    md = [o["data"]["text/markdown"] for o in c["outputs"] if "text/markdown" in o.get("data", {})]
    shown = "".join("".join(m) if isinstance(m, list) else m for m in md)      # a notebook stores text either way
    assert ns["table"] == shown, "the table is stale: run nbs/index.ipynb's table cell, then scripts/readme.py"
    assert shown in (ROOT/"README.md").read_text()

def test_the_headline_is_recomputed_from_the_committed_per_prompt_records():
    "Each pooled figure of the small job's table (held-out and sealed, T = 0 and served), from its per-prompt file."
    import json
    from eagle3nb.power import headline_from_per_prompt
    res = ROOT/"nbs"/"results"
    rep = json.loads((res/"small_report.json").read_text())
    s = rep["sampled"]
    blocks = [(0.0, "heldout", rep["power"]), (0.0, "sealed", rep["sealed"]["power"]),
              (s["temperature"], "heldout", s["power"]), (s["temperature"], "sealed", s["sealed"]["power"])]
    for t, which, p in blocks:
        h = headline_from_per_prompt(res/"small_per_prompt.jsonl", which, ks=p["k"], temperature=t)
        assert (h["n_prompts"], h["tokens_per_forward"]) == (p["n_prompts"], p["tokens_per_forward"]), (t, which)
