"""README.md from nbs/index.ipynb, the front page (nbdev_readme needs Quarto, which this project does not use).

    python scripts/readme.py          # write README.md
    python scripts/readme.py --check  # exit 1 if README.md is not what index.ipynb renders to
"""
import json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def _links(md:str) -> str:
    "Links and images relative to nbs/ become relative to the repository root."
    return re.sub(r"\]\((?!https?://|#|/)([^)]+)\)", lambda m: f"](nbs/{m.group(1)})", md)

def _text(o:dict) -> str:
    if o["output_type"] == "stream": return "".join(o["text"])
    return "".join(o.get("data", {}).get("text/plain", ""))

def _markdown(o:dict) -> str: return "".join(o.get("data", {}).get("text/markdown", ""))

def render(nb_path=ROOT/"nbs"/"index.ipynb") -> str:
    ("The README text of the index notebook: its markdown, its visible code cells and their outputs (Markdown "
     "outputs as Markdown, others as text); a cell marked `#| echo: false` shows its output alone.")
    out = []
    for c in json.loads(Path(nb_path).read_text())["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] == "markdown": out.append(_links(src))
        elif c["cell_type"] == "code" and not src.lstrip().startswith("#| hide"):
            if "#| echo: false" not in src: out.append("```python\n" + src + "\n```")
            outs = c.get("outputs", [])
            if any(_markdown(o) for o in outs): out.append(_links("".join(_markdown(o) for o in outs).strip("\n")))
            elif text := "".join(_text(o) for o in outs).rstrip("\n"): out.append("```\n" + text + "\n```")
    return "\n\n".join(out) + "\n"

if __name__ == "__main__":
    want, p = render(), ROOT/"README.md"
    if "--check" in sys.argv:
        if p.read_text() != want:
            print("FAIL: README.md is not what nbs/index.ipynb renders to; edit nbs/index.ipynb and run "
                  "`.venv/bin/python scripts/readme.py`")
            sys.exit(1)
    else: p.write_text(want)
