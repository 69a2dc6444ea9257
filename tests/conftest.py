import os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent/"shared"
BIN = Path(sys.executable).parent   # the venv's bin: console scripts live beside python

@pytest.fixture(scope="session")
def shared_tokenizers():
    d = SHARED/"tokenizers"
    assert d.is_dir(), f"{d} is missing: tests need ../shared/tokenizers beside the project"
    return d

def run(cmd, env=None, **kw):
    "Run a command, return CompletedProcess (text)."
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, **kw)
