("The capture benchmark alternates its legs and reports a median ratio with its spread (the numbers "
 "themselves are not asserted).")
import re
from conftest import ROOT, run
import sys

def test_capture_benchmark_alternates_legs():
    r = run([sys.executable, str(ROOT/"bench"/"capture_throughput.py"), "--records", "4", "--targets",
             "tiny-llama", "--reps", "3"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "legs, in order: bare capture bare capture bare capture" in r.stdout
    assert re.search(r"ratio capture / bare: median \d+\.\d{3}, spread \d+\.\d{3}-\d+\.\d{3} over 3 pairs",
                     r.stdout), r.stdout
    r = run([sys.executable, str(ROOT/"bench"/"capture_throughput.py"), "--targets", "tiny-llama", "--reps", "2"])
    assert r.returncode == 2 and "at least 3" in r.stderr
