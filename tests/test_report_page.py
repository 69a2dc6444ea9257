"The report page a user opens (`RUN/report.html`), from a real run: tables as tables, words instead of Python reprs."
import re

def test_report_page_of_a_real_run_reads_as_a_page(tiny_main_job):
    page = (tiny_main_job/"report.html").read_text()          # written by `eagle3nb run --size tiny` itself
    pres = re.findall(r"<pre>(.*?)</pre>", page, re.S)
    assert not [p for p in pres if re.search(r"^\s*\|.*\|\s*$", p, re.M)], "a Markdown table inside <pre>"
    prose = re.sub(r"<pre>.*?</pre>|<img[^>]*>", "", page, flags=re.S)
    reprs = re.findall(r".{60}(?:\{'|\{&#x27;).{60}", prose)
    assert not reprs, reprs                                   # a dict's repr in the prose
    assert page.count("<table>") >= 3 and "<details><summary>Tokens per target forward at every K" in page

def test_where_each_method_wins_is_an_html_table(tiny_main_job, tmp_path):
    "The tiny run's prompts tie, so its wins list is empty: a copy given one win each renders them as a real table."
    import json
    from conftest import copy_run
    from eagle3nb.core import Run
    from eagle3nb.report import write_report
    run = copy_run(tiny_main_job, tmp_path/"run")
    p = Run(run).eval_report
    rep = json.loads(p.read_text())
    win = lambda i, d: {"id": i, "conversation": i, "eagle3": 1.0 + max(d, 0), "ngram": 1.0 - min(d, 0), "diff": d,
                        "prompt": "a | b\nc"}
    rep["top_wins"] = {"eagle3": [win("p0", 0.5)], "ngram": [win("p1", -0.25)]}
    p.write_text(json.dumps(rep))
    page = write_report(run)[1].read_text()
    assert "<td>ngram</td><td>p1</td><td>1.00</td><td>1.25</td><td>-0.25</td><td>a | b c</td>" in page
    assert "<pre>" not in page.split("Where each method wins most")[1].split("<h2>")[0]
