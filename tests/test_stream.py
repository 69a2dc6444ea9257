"""Streamed training (`source = "stream"`) against a vLLM look-alike that writes hidden states exactly as eagle3nb's
connector does (tiny-llama's real states, over HTTP): the same batches and losses as offline training on shards
captured through the same server, a kill -9 of the trainer resumes with every record trained once per epoch, the
spool stays under its cap, a server with other layers is refused; a server dying mid-run hands its records to a
live one, and a kill -9 of the only server then a rerun resumes with every record accounted.
The real vLLM server: tests/test_vllm_stream.py."""
import json, os, signal, subprocess, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
import pytest, torch
from conftest import BIN, pause_env, run, wait_paused
from eagle3nb.capture import CaptureConfig
from eagle3nb.capture_vllm import capture_vllm, server_layer_ids
from eagle3nb.core import InputError, JsonlWriter, read_jsonl, read_manifest
from eagle3nb.models import load_target
from eagle3nb.stream import FakeVllm, stream_report

AUX = [2, 4, 5]

def tiny_states():
    "`states_of(ids)`: what vLLM's extractor keeps of tiny-llama: the states entering layers 2, 4, 5, the pre-norm L."
    from eagle3nb.capture import base_model
    model, lock = load_target("tiny-llama").load_model(), threading.Lock()
    bm, L = base_model(model), model.config.num_hidden_layers
    def states_of(ids):
        caught = {}
        def keep(i): return lambda m, a, k: caught.__setitem__(i, a[0] if a else k["hidden_states"])
        with lock:
            hooks = [bm.layers[i].register_forward_pre_hook(keep(i), with_kwargs=True) for i in AUX]
            hooks.append(bm.norm.register_forward_pre_hook(keep(L), with_kwargs=True))
            try:
                with torch.inference_mode(): bm(input_ids=torch.tensor([ids]))
            finally:
                for h in hooks: h.remove()
        return torch.stack([caught[i][0] for i in server_layer_ids(AUX, L)], 1)
    return states_of

class FakeServer:
    "A vLLM look-alike on loopback: /v1/models and /v1/completions answering `kv_transfer_params.hidden_states_path`."
    def __init__(self, storage, layer_ids=None, max_model_len=512, delay=0.0,
                 die_after=None): # after this many POSTs (the probe's included) it drops the next and stops listening
        cfg = load_target("tiny-llama").config()
        L, H = cfg["num_hidden_layers"], cfg["hidden_size"]
        self.fake = FakeVllm(storage, layer_ids or server_layer_ids(AUX, L), H, L, tiny_states(), max_model_len)
        fake, self.hits, self.posts, self.dead, lock = self.fake, [], 0, False, threading.Lock()
        class H_(BaseHTTPRequestHandler):
            def _send(self, obj):
                b = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)
            def do_GET(self): self._send({"data": [{"id": "tiny", "max_model_len": max_model_len}]})
            def do_POST(self):
                j = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    outer.posts += 1
                    dies = die_after is not None and outer.posts > die_after and not outer.dead
                    outer.dead = outer.dead or dies
                if outer.dead:                       # dies mid-request: no answer, then connections refused
                    if dies: threading.Thread(target=outer.close, daemon=True).start()
                    self.close_connection = True
                    return
                time.sleep(delay)
                outer.hits.append(len(j["prompt"]))
                path = fake.write(j["prompt"])
                self._send({"choices": [{"text": "x"}], "kv_transfer_params": {"hidden_states_path": path}})
            def log_message(self, *a): pass
        outer = self
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), H_)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
    def close(self):
        self.http.shutdown()
        self.http.server_close()

def server_process(storage, delay:float=0.0):
    "A `FakeServer` in a process of its own, to be killed -9: `(process, url)`."
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); import test_stream as t; "
            "s = t.FakeServer(sys.argv[2], delay=float(sys.argv[3])); print(s.url, flush=True); time.sleep(3600)")
    p = subprocess.Popen([sys.executable, "-c", code, str(Path(__file__).parent), str(storage), str(delay)],
                         stdout=subprocess.PIPE, start_new_session=True)
    return p, p.stdout.readline().decode().strip()

def records(run, n=16, seed=0):
    "tiny-llama's greedy continuations of random 10-token prompts, cut to 20-50 tokens; the continuations labelled."
    model, g = load_target("tiny-llama").load_model(), torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, 5000, (n, 10), generator=g)
    with torch.no_grad(): out = model.generate(prompts, max_new_tokens=40, do_sample=False, pad_token_id=0).tolist()
    Path(run, "validate").mkdir(parents=True, exist_ok=True)
    with JsonlWriter(Path(run)/"validate/records.jsonl") as w:
        for i, ids in enumerate(out):
            ids = ids[:int(torch.randint(20, 51, (1,), generator=g))]
            w.write({"id": f"r{i:02d}", "input_ids": ids, "loss_mask": [0] * 10 + [1] * (len(ids) - 10)})
    return Path(run)

KW = dict(ttt_steps=2, draft_vocab_size=256, batch_tokens=128, lr=3e-3, warmup_steps=2, log_every=1, ckpt_every=2,
          eval_every=4, heldout=0.15, epochs=2)

@pytest.fixture(scope="module")
def recs(tmp_path_factory):
    return records(tmp_path_factory.mktemp("recs")/"run")

def copy(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return dst

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = FakeServer(tmp_path_factory.mktemp("server"))
    yield s
    s.close()

def rows(run, split="train"): return [r for r in read_jsonl(Path(run)/"train/metrics.jsonl") if r["split"] == split]

@pytest.fixture(scope="module")
def offline(recs, server, tmp_path_factory):
    "Offline training on shards captured through the same server: the reference."
    off = copy(recs, tmp_path_factory.mktemp("off")/"run")
    capture_vllm(off, urls=[server.url], target="tiny-llama", dtype="bfloat16", progress=False)
    from eagle3nb.train import train
    t0 = time.time()
    train(off, target="tiny-llama", progress=False, **KW)
    print(f"offline training {time.time() - t0:.1f} s")
    return off

def same_curve(a, b):
    "The same metrics rows, step by step, bitwise (the measured speed aside)."
    for split in ("train", "heldout"):
        x, y = rows(a, split), rows(b, split)
        assert len(x) == len(y) > 0
        for u, v in zip(x, y):
            drop = lambda r: {k: w for k, w in r.items() if k != "tokens_per_s"}
            assert drop(u) == drop(v), u["step"]

class SpoolWatch:
    "Polls the bytes in a spool folder every few ms; `peak` is the most it ever saw."
    def __init__(self, d):
        self.d, self.peak, self.stop = Path(d), 0, False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()
    def _run(self):
        while not self.stop:
            try: self.peak = max(self.peak, sum(p.stat().st_size for p in self.d.rglob("*") if p.is_file()))
            except FileNotFoundError: pass
            time.sleep(0.003)
    def close(self):
        self.stop = True
        self.t.join()
        return self.peak

CAP_GB = 0.0004   # 429,496 bytes: about 7 tiny-llama records (spool files and the server's)

def test_stream_equals_offline(offline, recs, server, tmp_path):
    from eagle3nb.train import train
    st = copy(recs, tmp_path/"st")
    watch, t0 = SpoolWatch(st/"spool"), time.time()
    train(st, target="tiny-llama", progress=False, source="stream", capture=CaptureConfig(urls=[server.url]),
          spool_gb=CAP_GB, **KW)
    seen = watch.close()
    same_curve(offline, st)
    rep = stream_report(st)
    n_train = read_manifest(offline/"train")["counts"]["train_records"]
    got = (rep["trained"], rep["failed"], rep["duplicates"], rep["requeued"], rep["pending"])
    assert got == (2 * n_train, 0, 0, 0, 0)
    assert rep["epochs"]["0"]["trained"] == rep["epochs"]["1"]["trained"] == n_train
    assert 0 < seen <= rep["spool_peak_bytes"] <= rep["spool_cap_bytes"] == int(CAP_GB * 2**30)
    assert list((st/"spool/shards").iterdir()) == []          # every file consumed and deleted
    print(f"stream = offline over {len(rows(st))} steps in {time.time() - t0:.1f} s; waited {rep['waited_s']} s of "
          f"{rep['wall_s']} s; spool peak {rep['spool_peak_bytes']} (seen on disk {seen}) of "
          f"{rep['spool_cap_bytes']} bytes")

def kill_at_checkpoint(args, run, step:int=4):
    "Run trainer command `args`; it waits after checkpoint `step` (`pause_point`), and its process group is killed -9."
    env, marker = pause_env(run.parent, "checkpoint", step)
    p = subprocess.Popen(args, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try: wait_paused(p, marker)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    assert (run/f"train/checkpoints/step-{step:06d}.pt").exists()

def test_kill_9_of_the_trainer_then_rerun(offline, recs, server, tmp_path):
    st = copy(recs, tmp_path/"st")
    args = [str(BIN/"eagle3nb"), "train", "--run", str(st), "--target", "tiny-llama", "--source", "stream",
            "--urls", server.url, "--spool_gb", str(CAP_GB), *(a for k, v in KW.items() for a in (f"--{k}", str(v)))]
    watch = SpoolWatch(st/"spool")
    kill_at_checkpoint(args, st)
    assert not (st/"train/manifest.json").exists()
    killed = stream_report(st)
    r = run(args)                                               # the rerun, through the CLI too
    assert r.returncode == 0, r.stderr[-3000:]
    assert "stream: waited" in r.stdout and "requeued" in r.stdout
    seen = watch.close()
    same_curve(offline, st)                                     # resumed: the uninterrupted curve
    rep = stream_report(st)
    n_train = read_manifest(offline/"train")["counts"]["train_records"]
    got = (rep["trained"], rep["failed"], rep["duplicates"], rep["pending"], rep["attempts"])
    assert got == (2 * n_train, 0, 0, 0, 2)
    assert rep["requeued"] == killed["pending"]                 # what the killed run served after its checkpoint
    assert seen <= rep["spool_cap_bytes"] and rep["spool_peak_bytes"] <= rep["spool_cap_bytes"]
    m = read_manifest(st/"train/stream")                       # written when the trainer exits
    assert m["counts"]["trained"] == 2 * n_train and m["config"]["urls"] == [server.url]
    print(f"killed after checkpoint 4 ({killed['trained']} record-epochs trained, {killed['pending']} served after "
          f"it); the rerun requeued {rep['requeued']}; spool on disk peaked at {seen} of "
          f"{rep['spool_cap_bytes']} bytes")

def test_keep_spool_is_an_offline_capture(offline, recs, server, tmp_path):
    from eagle3nb.sources import OfflineSource
    from eagle3nb.train import train
    st = copy(recs, tmp_path/"st")
    hits = len(server.hits)
    train(st, target="tiny-llama", progress=False, source="stream", capture=CaptureConfig(urls=[server.url]),
          keep_spool=True, **KW)
    n = read_manifest(offline/"train")["counts"]["records"]
    assert len(server.hits) - hits - 1 == n                     # each record once (a probe, then no second epoch)
    same_curve(offline, st)
    keep = copy(offline, tmp_path/"again")                       # the kept spool as the capture of another run
    import shutil
    shutil.rmtree(keep/"capture")
    shutil.rmtree(keep/"train")
    shutil.copytree(st/"spool", keep/"capture")
    train(keep, target="tiny-llama", progress=False, **KW)
    same_curve(offline, keep)

def test_a_server_with_other_layers_is_refused(recs, tmp_path):
    from eagle3nb.train import train
    bad = FakeServer(tmp_path/"bad", layer_ids=[1, 4, 5, 8])
    try:
        with pytest.raises(InputError, match=r"writes layers \[1, 4, 5, 8\]; this capture needs \[2, 4, 5, 8\]"):
            train(copy(recs, tmp_path/"st"), target="tiny-llama", progress=False, source="stream",
                  capture=CaptureConfig(urls=[bad.url]), **KW)
    finally: bad.close()

def test_several_servers_share_the_requests(offline, recs, server, tmp_path):
    from eagle3nb.train import train
    other = FakeServer(tmp_path/"other")
    try:
        st, a, b = copy(recs, tmp_path/"st"), len(server.hits), len(other.hits)
        train(st, target="tiny-llama", progress=False, source="stream",
              capture=CaptureConfig(urls=[server.url, other.url]), spool_gb=CAP_GB,
              stream_concurrency=2, **KW)
        same_curve(offline, st)
        got = (len(server.hits) - a - 1, len(other.hits) - b - 1)   # less each one's probe
        served = sum(len(r["ids"]) for r in read_jsonl(st/"train/stream/ledger-r0.jsonl") if "ids" in r)
        assert min(got) > 0 and sum(got) == served, (got, served)   # both busy, each record asked for once per use
    finally: other.close()

def test_torchrun_ranks_stream_disjoint_shares(offline, recs, server, tmp_path):
    st = copy(recs, tmp_path/"st")
    r = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
             str(BIN/"eagle3nb"), "--", "train", "--run", str(st), "--target", "tiny-llama", "--source", "stream",
             "--urls", server.url,
             "--spool_gb", str(2 * CAP_GB), *(a for k, v in KW.items() for a in (f"--{k}", str(v)))],
            env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    shares = [{x["step"]: set(x["ids"]) for x in read_jsonl(st/f"train/stream/ledger-r{k}.jsonl") if "ids" in x
               and x["kind"] == "train"} for k in (0, 1)]
    assert shares[0] and shares[1]
    assert all(not ids & shares[1].get(step, set()) for step, ids in shares[0].items())   # disjoint at every step
    assert stream_report(st)["trained"] == 2 * read_manifest(offline/"train")["counts"]["train_records"]
    for x, y in zip(rows(offline), rows(st)):                   # DDP = one process (float sums in another order)
        assert x["supervised"] == y["supervised"]
        for u, v in zip(x["loss_k"], y["loss_k"]):
            assert abs(u - v) <= 1e-4 * max(1, abs(u)), (x["step"], u, v)

def test_a_dead_servers_records_go_to_a_live_one(offline, recs, server, tmp_path):
    from eagle3nb.train import train
    dying = FakeServer(tmp_path/"dying", die_after=6)            # the probe and 5 records, then it dies mid-request
    try:
        st = copy(recs, tmp_path/"st")
        train(st, target="tiny-llama", progress=False, source="stream",
              capture=CaptureConfig(urls=[dying.url, server.url]),
              spool_gb=CAP_GB, stream_concurrency=2, **KW)
    finally: dying.close()
    assert dying.dead and len(dying.hits) == 6
    same_curve(offline, st)                                      # nothing lost: the curve of one live server
    rep = stream_report(st)
    n_train = read_manifest(offline/"train")["counts"]["train_records"]
    assert (rep["trained"], rep["failed"], rep["duplicates"], rep["pending"]) == (2 * n_train, 0, 0, 0)
    assert rep["epochs"]["0"]["trained"] == rep["epochs"]["1"]["trained"] == n_train
    assert rep["spool_peak_bytes"] <= rep["spool_cap_bytes"]

def test_kill_9_of_the_server_then_rerun(offline, recs, server, tmp_path):
    st = copy(recs, tmp_path/"st")
    # a record every 0.3 s a connection: the trainer waits on the server, so that records are still to come when the
    # server dies (without it the trainer could spool the rest and finish between checkpoint 4 and the kill)
    proc, url = server_process(tmp_path/"doomed", delay=0.3)
    args = [str(BIN/"eagle3nb"), "train", "--run", str(st), "--target", "tiny-llama", "--source", "stream",
            "--urls", url, "--spool_gb", str(CAP_GB), *(a for k, v in KW.items() for a in (f"--{k}", str(v)))]
    watch = SpoolWatch(st/"spool")
    env, marker = pause_env(tmp_path, "checkpoint", 4)            # the trainer waits after checkpoint 4
    p = subprocess.Popen(args, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        ck = st/"train/checkpoints"
        wait_paused(p, marker)
        os.kill(proc.pid, signal.SIGKILL)                         # the server, not the trainer
        proc.wait()
        marker.unlink()                                           # the trainer goes on, against a dead server
        err = p.communicate(timeout=300)[1].decode()              # the trainer gives up on its own
    finally:
        for q in (proc, p):
            if q.poll() is None: os.killpg(q.pid, signal.SIGKILL)
    assert p.returncode != 0 and "every record of its batch failed" in err, err[-3000:]
    killed, last = stream_report(st), int(sorted(ck.glob("step-*.pt"))[-1].name[5:-3])
    from eagle3nb.train import train
    train(st, target="tiny-llama", progress=False, source="stream", capture=CaptureConfig(urls=[server.url]),
          spool_gb=CAP_GB, **KW)
    seen = watch.close()
    starts = [r["start"] for r in read_jsonl(st/"train/stream/ledger-r0.jsonl") if "start" in r]
    assert starts == [0, last] and last >= 4                      # resumed from the killed run's last checkpoint
    rep = stream_report(st)
    n_train = read_manifest(offline/"train")["counts"]["train_records"]
    assert (rep["duplicates"], rep["pending"], rep["attempts"]) == (0, 0, 2)
    for e in ("0", "1"):                                          # every record of every epoch: trained or failed
        assert rep["epochs"][e]["trained"] + rep["epochs"][e]["failed"] == n_train, rep["epochs"]
    assert rep["requeued"] == killed["pending"] > 0               # served after the last checkpoint: served again
    assert all(why.startswith(url) for why in rep["failed_reasons"].values()), rep["failed_reasons"]
    assert seen <= rep["spool_cap_bytes"] and 0 < rep["spool_peak_bytes"] <= rep["spool_cap_bytes"]
    print(f"server killed after checkpoint 4; the trainer stopped at checkpoint {last}, {killed['pending']} records "
          f"served after it; the rerun requeued {rep['requeued']}, failed {rep['failed']} (the dead server's); "
          f"spool on disk peaked at {seen} of {rep['spool_cap_bytes']} bytes")

def test_a_full_spool_disk_stops_the_run_said_plainly(recs, server, tmp_path, monkeypatch):
    "The spool's disk full (safetensors' own error): the run stops naming the file and what to do, not a failed record."
    import safetensors.torch
    from safetensors import SafetensorError
    from eagle3nb.core import DiskFullError
    from eagle3nb.train import train
    real = safetensors.torch.save_file
    def save_file(tensors, path, *a, **k):                     # the spool's disk is full; the server's is not
        if "/spool/" not in str(path): return real(tensors, path, *a, **k)
        Path(path).write_bytes(b"half")
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space '
                              'left on device" })')
    monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    st = copy(recs, tmp_path/"st")
    with pytest.raises(DiskFullError, match=r"spool/shards/\S+\.safetensors: no space left on its disk .* then rerun"):
        train(st, target="tiny-llama", progress=False, source="stream", capture=CaptureConfig(urls=[server.url]),
              spool_gb=CAP_GB, **KW)
    assert list((st/"spool/shards").glob("*.tmp")) == []        # no half-written file left

def test_the_old_train_keys_name_their_new_home(tmp_path):
    "A stream reads the capture's servers and dtype: `[train] urls` and `spool_dtype` are refused, naming `[capture]`."
    from eagle3nb.settings import pipeline_config
    toml = tmp_path/"old.toml"
    toml.write_text('[train]\nsource = "stream"\nurls = ["http://node0:8000"]\n')
    with pytest.raises(InputError, match=r"`urls` moved to \[capture\]: use `urls` in \[capture\]"):
        pipeline_config(toml)
    with pytest.raises(InputError, match=r"`spool_dtype` was renamed: use `dtype` in \[capture\]"):
        pipeline_config(train={"spool_dtype": "float16"})
    r = run([str(BIN/"eagle3nb"), "train", "--run", str(tmp_path), "--spool_dtype", "float16"])
    assert r.returncode == 2 and "--spool_dtype was renamed: use --dtype" in r.stderr, r.stderr
    c = pipeline_config(train={"source": "stream"}, capture={"urls": ["http://node0:8000"], "dtype": "float16"})
    assert (c.capture.urls, c.capture.dtype) == (["http://node0:8000"], "float16")
