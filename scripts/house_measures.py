#!/usr/bin/env python3
"""How the notebooks read as a tutorial, measured the way fastcore's and miniai's were.

Usage (from the project root):  python3 scripts/house_measures.py [--list] [--check]

The team's measure (a copy of the team's tool, kept in the repository so that it runs from a clone alone);
`scripts/test.sh` prints it. `--check` exits 1 when a target of the house is missed: at least 60% of export cells followed by a lesson,
at most 20% of public names never shown, no run of more than 4 export cells without a lesson, no markdown cell over
200 words in a stage notebook.

- export cells: count, median and max lines (lines of a `#| export` cell, `#|` lines not counted)
- lessons: share of export cells followed by a lesson (a code cell that is neither an export nor `show_doc`)
  before the next export; the longest run of export cells with no lesson between them
- never shown: public names an export cell defines that no lesson cell of the same notebook mentions
- long prose: markdown cells over 200 words
- big modules: generated modules over 600 lines
For reference (measured the same way): fastcore 73% followed, 19% never shown, 0 long markdown cells;
fastai's miniai 71% and 16%. `--list` names the notebooks, the never-shown names and the long cells.
"""
import ast, glob, json, re, statistics, sys
from pathlib import Path

DIRECTIVE = re.compile(r"^\s*#\s*\|\s*([\w-]+)")

def directives(src): return [m.group(1) for line in src.splitlines() if (m := DIRECTIVE.match(line))]
def is_export(src): return any(d in ("export", "exports", "exporti") for d in directives(src))
def is_lesson(src): return bool(src.strip()) and not is_export(src) and not src.strip().startswith("show_doc")
def code_lines(src): return [l for l in src.splitlines() if l.strip() and not DIRECTIVE.match(l)]

def public_names(src):
    "Top-level names a cell defines (`@patch`ed methods by their own name)."
    try: tree = ast.parse("\n".join("" if l.lstrip().startswith(("%", "!")) else l for l in src.splitlines()))
    except SyntaxError: return []
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return [n for n in names if not n.startswith("_")]

def notebook(path):
    cells = [(c["cell_type"], "".join(c["source"])) for c in json.load(open(path))["cells"]]
    code = [s for t, s in cells if t == "code" and s.strip()]
    exports = [s for s in code if is_export(s)]
    followed, run, longest = 0, 0, 0
    for i, s in enumerate(code):
        if is_export(s):
            run += 1
            longest = max(longest, run)
            nxt = next((x for x in code[i + 1:] if is_export(x) or is_lesson(x)), None)
            followed += nxt is not None and not is_export(nxt)
        elif is_lesson(s): run = 0
    lessons = "\n".join(re.sub(r"#.*", "", s) for s in code if is_lesson(s))
    names = [n for s in exports for n in public_names(s)]
    never = [n for n in names if not re.search(rf"\b{re.escape(n)}\b", lessons)]
    long_md = [(len(s.split()), s.strip().splitlines()[0][:70]) for t, s in cells if t == "markdown" and len(s.split()) > 200]
    return dict(sizes=[len(code_lines(s)) for s in exports], followed=followed, longest=longest,
                names=len(names), never=never, long_md=long_md)

def main():
    show = "--list" in sys.argv
    sizes, followed, names, never, long_md, runs = [], 0, 0, 0, 0, []
    for nb in sorted(glob.glob("nbs/[0-9]*.ipynb")):
        r = notebook(nb)
        if not r["sizes"]: continue
        sizes += r["sizes"]; followed += r["followed"]; names += r["names"]; never += len(r["never"])
        long_md += len(r["long_md"]); runs.append(r["longest"])
        if show:
            print(f"{Path(nb).name:26s} exports {len(r['sizes']):3d}  followed {r['followed']:3d}  longest run {r['longest']:2d}  "
                  f"never shown {len(r['never'])}: {', '.join(r['never'][:12])}")
            for w, head in r["long_md"]: print(f"{'':26s} markdown {w} words: {head}")
    big = [f"{p.name}:{n}" for p in sorted(Path("eagle3nb").glob("*.py")) if p.name != "_modidx.py"
           and (n := len(p.read_text().splitlines())) > 600]
    print(f"house: {len(sizes)} export cells (median {statistics.median(sizes):g}, max {max(sizes)} lines); "
          f"{followed / len(sizes):.0%} followed by a lesson; longest run without one {max(runs)}; "
          f"{never / max(names, 1):.0%} of {names} public names never shown on their page; "
          f"{long_md} markdown cells over 200 words; modules over 600 lines: {', '.join(big) or 'none'}")
    missed = [w for w, ok in [("lessons < 60%", followed / len(sizes) >= 0.6), ("never shown > 20%", never <= 0.2 * names),
                               ("a run of more than 4 exports", max(runs) <= 4), ("long markdown cells", long_md == 0)] if not ok]
    if "--check" in sys.argv and missed: sys.exit(f"house targets missed: {', '.join(missed)}")

if __name__ == "__main__": main()
