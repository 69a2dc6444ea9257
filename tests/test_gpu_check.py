"""`scripts/gpu_check.sh --dry-run` (#33 item 6): the GPU check's CPU part runs here and prints its one summary table:
the cuda tier reported as skipped, the real-shape Qwen3-8B drafter's training step timed on the CPU (true shape, one
step of 16 tokens: ~40 s, ~13 GiB peak RSS), evaluate on the tiny target. Tier: `make test-slow`."""
import json, re
import pytest
from conftest import ROOT, run

pytestmark = [pytest.mark.slow, pytest.mark.real_shapes]

def test_gpu_check_dry_run_prints_its_table(tmp_path):
    r = run(["bash", str(ROOT/"scripts"/"gpu_check.sh"), "--dry-run"], env={"GPU_CHECK_OUT": str(tmp_path)},
            timeout=300)
    print(r.stdout[-1500:])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    table = r.stdout[r.stdout.index("gpu_check --dry-run on"):].splitlines()
    assert table[1].split("|")[1:4] == [" step                     ", " status  ", "  s "], table[1]
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:]] for ln in table[3:] if ln.startswith("|")}
    assert list(rows) == ["set-up", "cuda tier", "real-shape Qwen3-8B step", "evaluate (tiny target)"], rows
    assert rows["cuda tier"][0] == "skipped" and rows["cuda tier"][2] == "dry run"
    assert rows["set-up"][0] in ("kept", "ok")
    step = json.loads((tmp_path/"real-shape-step.log").read_text().splitlines()[-1])
    # the true shape, the shipped config's K, on the CPU in float32
    assert (step["device"], step["dtype"], step["ttt_steps"], step["tokens_per_step"]) == ("cpu", "float32", 7, 16)
    assert 1.0 < step["params_b"] < 1.1 and step["tokens_per_s"] > 0 and 0 < step["mfu"] and step["peak_gib"] > 4
    assert rows["real-shape Qwen3-8B step"][0] == "ok"
    assert re.match(r"cpu float32: 16 tokens/step \(1 x 16, K=7\), [\d.]+ tok/s, peak RSS [\d.]+ GiB, MFU [\d.]+$",
                    rows["real-shape Qwen3-8B step"][2]), rows
    assert rows["evaluate (tiny target)"][0] == "ok"
    assert rows["evaluate (tiny target)"][2].startswith("tiny-llama on cpu (float32), 4 prompts"), rows
