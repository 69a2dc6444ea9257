("`make run` without a vLLM venv says the check was not run; once the venv exists, the next run runs the check "
 "instead of skipping export as done earlier.")
from conftest import BIN, copy_run, run
from eagle3nb.core import Run

def test_a_check_skipped_for_want_of_vllm_runs_once_the_venv_is_there(tiny_main_job, tmp_path):
    d = copy_run(tiny_main_job, tmp_path/"run")
    venv, started = tmp_path/"vllm-venv", tmp_path/"started"
    (venv/"bin").mkdir(parents=True)
    (venv/"bin"/"python").write_text(f"#!/bin/sh\necho started >> {started}\nexit 1\n")   # a vLLM that cannot serve
    (venv/"bin"/"python").chmod(0o755)
    cmd = [str(BIN/"eagle3nb"), "run", "--size", "tiny", "--run", str(d), "--set", "export.vllm_check=auto"]
    absent = {"VLLM_VENV": str(tmp_path/"no-venv"), "EAGLE3NB_VLLM_PYTHON": ""}
    r = run(cmd, env=absent)
    assert r.returncode == 0 and "vllm check: not run (no vLLM venv" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    r = run(cmd, env=absent)                                   # nothing changed: export is done
    assert "export: done earlier under the same settings — skipped" in r.stdout, r.stdout[-2000:]
    assert not started.exists()
    r = run(cmd, env={**absent, "VLLM_VENV": str(venv)})       # the venv now exists: the check runs
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "export: done earlier" not in r.stdout and started.exists(), r.stdout[-2000:]
    assert "vLLM exited (1) before serving" in Run(d).vllm_check.read_text()
