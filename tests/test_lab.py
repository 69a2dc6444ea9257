("JupyterLab from the venv, offline on loopback: its contents API lists nbs/, and a notebook runs cell by cell "
 "through its kernel API.")
import asyncio, json, os, signal, subprocess, sys, time, uuid
from pathlib import Path
import httpx
from conftest import BIN, ROOT, free_port

def _execute_cells(base:str, token:str, cells:list) -> list:
    "Start a kernel over REST, run each code cell over the kernel's websocket channel, return the reply statuses."
    from tornado.websocket import websocket_connect
    async def go():
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"token {token}"}, timeout=60) as c:
            k = (await c.post("/api/kernels", json={"name": "python3"})).json()
            ws = await websocket_connect(f"{base.replace('http', 'ws')}/api/kernels/{k['id']}/channels?token={token}")
            statuses = []
            try:
                for src in cells:
                    mid = uuid.uuid4().hex
                    ws.write_message(json.dumps({"header": {"msg_id": mid, "msg_type": "execute_request",
                                                            "username": "t", "session": "s", "version": "5.3"},
                                                 "parent_header": {}, "metadata": {}, "channel": "shell",
                                                 "content": {"code": src, "silent": False, "store_history": True,
                                                             "user_expressions": {},
                                                             "allow_stdin": False, "stop_on_error": True}}))
                    while True:
                        msg = json.loads(await asyncio.wait_for(ws.read_message(), 120))
                        if msg.get("parent_header", {}).get("msg_id") == mid and msg["msg_type"] == "execute_reply":
                            statuses.append((msg["content"]["status"], msg["content"].get("evalue")))
                            break
            finally:
                ws.close()
                await c.delete(f"/api/kernels/{k['id']}")
            return statuses
    return asyncio.run(go())

def test_jupyterlab_lists_nbs_and_runs_a_notebook(tmp_path):
    port, token = free_port(), uuid.uuid4().hex
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path/"cfg"), "JUPYTER_RUNTIME_DIR": str(tmp_path/"rt"),
           "JUPYTER_DATA_DIR": str(tmp_path/"data"), "JUPYTER_PATH": str(Path(sys.prefix)/"share/jupyter")}
    p = subprocess.Popen([str(BIN/"jupyter"), "lab", "--no-browser", "--ip", "127.0.0.1", "--port", str(port),
                          f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={ROOT/'nbs'}",
                          *(["--allow-root"] if os.geteuid() == 0 else [])],
                         env=env, stdout=open(tmp_path/"lab.log", "w"),
                         stderr=subprocess.STDOUT, start_new_session=True)
    base, h = f"http://127.0.0.1:{port}", {"Authorization": f"token {token}"}
    try:
        t0 = time.time()
        while True:
            assert p.poll() is None, (tmp_path/"lab.log").read_text()[-3000:]
            try:
                if httpx.get(base + "/api/status", headers=h, timeout=2).status_code == 200: break
            except httpx.TransportError: pass
            assert time.time() - t0 < 120, (tmp_path/"lab.log").read_text()[-3000:]
            time.sleep(0.5)
        assert httpx.get(base + "/lab", headers=h, timeout=30).status_code == 200        # the lab page itself is served
        names = {x["name"] for x in httpx.get(base + "/api/contents/", headers=h, timeout=10).json()["content"]}
        assert {"00_core.ipynb", "12b_pipeline.ipynb", "index.ipynb"} <= names
        nb = httpx.get(base + "/api/contents/00_core.ipynb", headers=h, timeout=10).json()["content"]
        code = [c["source"] for c in nb["cells"] if c["cell_type"] == "code"]
        assert len(code) > 5
        # the kernel starts in nbs/ (the server's root), as a user's would; every cell must succeed
        statuses = _execute_cells(base, token, code)
        assert [s for s, _ in statuses] == ["ok"] * len(code), statuses
        # a failing cell is seen as failing
        assert _execute_cells(base, token, ["1/0"])[0] == ("error", "division by zero")
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        try: p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
