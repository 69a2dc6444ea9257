"""Real-shape drafters on CPU (#33): each shipped config's drafter built at its target's true shape, its target's
tensors read by name through a sharded checkpoint's index (only the draft rows of `lm_head`), trained 2 steps in the
config's dtype (bf16 autocast) on random hidden states of the target's width, killed -9 after a checkpoint and
resumed to the uninterrupted weights (to rounding), with the plan's memory figure against the measured peak RSS.
`pytest -m real_shapes` (slow tier). Each test's target and capture are built here: nothing is downloaded."""
import json, os, shutil, signal, subprocess, sys, time
from pathlib import Path
import pytest, torch
from conftest import BIN, pause_env, wait_paused
from real_shapes import NAMES, TARGETS, plan_need, plan_output, rss_run, write_capture, write_target
from eagle3nb.resume import compare_resumed, load_checkpoint, sample_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.real_shapes]
# 4 records a config; 2 steps of 2 records of 128 tokens (Kimi-K2.5: of 1 record of 64, so that its test, three
# training processes at 2.4 B parameters, stays within 5 minutes here: measured 297 s at 128 tokens a step)
RECORDS, LENGTHS = 4, {"qwen3": 128, "kimi_k25": 64}
BATCHES = {"qwen3": 256, "kimi_k25": 64}
GiB = 2**30


@pytest.fixture(scope="module", params=list(TARGETS), ids=lambda p: Path(p).stem)
def real(request, tmp_path_factory):
    "A shipped config's target at its true shape (sharded bf16 checkpoint of what a drafter reads) and a capture."
    from eagle3nb.settings import pipeline_config
    d = tmp_path_factory.mktemp("real")
    cfg = TARGETS[request.param]
    target = write_target(d/"target", cfg)
    aux = write_capture(d/"run", target, cfg, RECORDS, LENGTHS[cfg["model_type"]])
    yield {"config": request.param, "name": Path(request.param).stem, "target": target, "run": d/"run",
           "cfg": cfg, "aux": aux, "train": pipeline_config(request.param).train, "dir": d}
    shutil.rmtree(d, ignore_errors=True)      # gigabytes: gone before the next config's


READ = r"""
import json, sys, torch
from eagle3nb.drafter import target_embeddings, target_lm_head, target_tensor, NORM_NAMES
def status(k): return next(int(ln.split()[1]) * 1024 for ln in open("/proc/self/status") if ln.startswith(k))
d, V, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ids = sorted(torch.randperm(V, generator=torch.Generator().manual_seed(0))[:N].tolist())
open("/proc/self/clear_refs", "w").write("5")              # the peak (VmHWM) starts again from here
before = status("VmRSS:")
rows, norm = target_lm_head(d, rows=ids), target_tensor(d, *NORM_NAMES)
peak = status("VmHWM:") - before
anon = status("RssAnon:")
emb = target_embeddings(d, mapped=True)
looked_up = emb[torch.arange(0, V, V // 256)[:256]].float()          # a step's worth of rows, through the map
print(json.dumps({"delta": peak, "kept": rows.numel() * 2 + norm.numel() * 2, "shape": list(rows.shape),
                  "dtype": str(rows.dtype), "emb_shape": list(emb.shape), "emb_anon": status("RssAnon:") - anon,
                  "ids": ids[:3] + ids[-3:]}))
"""


def test_reads_by_name_only_the_draft_rows(real):
    """The target's tensors by their names in a sharded index; of lm_head only N rows: the peak RSS grows by the bytes
    kept. The embedding is mapped: looking rows up copies none of it into the process's own (anonymous) memory."""
    from safetensors import safe_open
    from eagle3nb.drafter import target_lm_head
    c = real["cfg"].get("text_config", real["cfg"])
    V, H, N = c["vocab_size"], c["hidden_size"], real["train"].draft_vocab_size
    r = subprocess.run([sys.executable, "-c", READ, str(real["target"]), str(V), str(N)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    o = json.loads(r.stdout)
    assert (o["shape"], o["dtype"], o["emb_shape"]) == ([N, H], "torch.bfloat16", [V, H])
    assert o["kept"] == N * H * 2 + H * 2
    assert 0.9 * o["kept"] <= o["delta"] <= 1.1 * o["kept"] + 32 * 2**20, o       # never the whole head (V rows)
    assert o["emb_anon"] <= 16 * 2**20, o                                          # 256 looked-up rows, no copy
    idx = json.loads((real["target"]/"model.safetensors.index.json").read_text())["weight_map"]
    name = NAMES[real["cfg"]["model_type"]]["lm_head"]
    with safe_open(str(real["target"]/idx[name]), "pt") as f:   # the rows are the rows, as safetensors reads them
        ref, got = f.get_slice(name), target_lm_head(real["target"], rows=o["ids"])
        assert all(torch.equal(got[k], ref[i:i + 1][0]) for k, i in enumerate(o["ids"]))


def _rows(run):
    return [json.loads(s) for s in (Path(run)/"train/metrics.jsonl").read_text().splitlines() if s.strip()]


def _plan_lines(real, optim_state:str, batch:int, *extra) -> str:
    "`eagle3nb run CONFIG --plan` for the built target at the length run here."
    return plan_output(real["config"], f"target={real['target']}", f"run={real['dir']/'plan'}",
                       f"train.batch_tokens={batch}", "train.bf16=always", "train.source=offline",
                       f"train.optim_state={optim_state}", extra=extra)


def _plan_need(real, optim_state:str, batch:int) -> float:
    return plan_need(_plan_lines(real, optim_state, batch))


def test_trains_resumes_and_fits_the_plan(real, capsys):
    "2 steps at true shape in bf16 autocast; kill -9 after step 1's checkpoint, resume: the uninterrupted weights."
    from eagle3nb.memory import available_memory, check_fits
    from eagle3nb.train import TrainConfig, step_memory
    from dataclasses import replace
    t, BATCH = real["train"], BATCHES[real["cfg"]["model_type"]]
    cfg = replace(t, source="offline", batch_tokens=BATCH, max_steps=2, ckpt_every=1, heldout=0.0, bf16="always",
                  log_every=1, keep_checkpoints=1)
    need = {s: step_memory(real["target"], replace(cfg, optim_state=s), real["aux"], "cpu") for s in
            ("float32", "bfloat16")}
    avail = available_memory("cpu")
    # the narrowest change that fits: AdamW's moments in bf16 where float32 ones do not fit this machine (Kimi-K2.5)
    limit = min(avail, 22 * GiB)         # this 23 GiB machine, less what the system and a neighbour need
    fits32 = need["float32"]["total"] <= limit
    cfg = replace(cfg, optim_state="float32" if fits32 else "bfloat16")
    args = [str(BIN/"eagle3nb"), "train", "--run"]
    flags = ["--ttt_steps", str(cfg.ttt_steps), "--draft_vocab_size", str(cfg.draft_vocab_size), "--lr", str(cfg.lr),
             "--warmup_steps", str(cfg.warmup_steps), "--batch_tokens", str(BATCH), "--max_steps", "2",
             "--ckpt_every", "1", "--heldout", "0", "--bf16", "always", "--log_every", "1", "--keep_checkpoints", "1",
             "--source", "offline", "--loss_chunk", str(cfg.loss_chunk or 0),
             *[x for k in ("norm_before_fc", "fc_norm", "norm_output")
               for x in (f"--{k}", str(getattr(cfg, k)).lower())],
             "--optim_state", cfg.optim_state]   # the config's norms, not the CLI's defaults (the main job's)
    out = _plan_lines(real, "float32", BATCH, "--gpu_mem", "80")
    assert "GPUs of 80 GiB: 1 (torchrun" in out and " h at 20,000 tokens/s" in out, out
    if not fits32:       # refused before anything is loaded, naming both sizes
        with pytest.raises(Exception, match=rf"training needs [\d.]+ GiB in this process but {limit / GiB:.1f} GiB"):
            check_fits(need["float32"], limit)
        if need["float32"]["total"] > avail:
            t0 = time.time()
            r = subprocess.run(args + [str(real["run"]), *flags[:-1], "float32"], capture_output=True, text=True)
            assert r.returncode != 0 and "training needs" in r.stderr and "optim_state" in r.stderr, r.stderr[-2000:]
            assert time.time() - t0 < 30 and not (real["run"]/"train/checkpoints").exists()
            assert "DOES NOT FIT (eagle3nb train refuses it before loading anything" in out, out
    ref, cut = real["dir"]/"ref", real["dir"]/"cut"
    for d in (ref, cut): shutil.copytree(real["run"], d)
    once = [x if flags[i - 1] != "--ckpt_every" else "2" for i, x in enumerate(flags)]   # one checkpoint, the last
    rc, peak, err = rss_run(args + [str(ref), *once])
    assert rc == 0, err
    want, rows_ref = sample_checkpoint(ref/"train/checkpoints/step-000002.pt"), _rows(ref)
    shutil.rmtree(ref)                                         # its gigabytes, before the second run writes its own
    env, marker = pause_env(real["dir"], "checkpoint", 1)   # it waits after step 1's checkpoint: killed there
    p = subprocess.Popen(args + [str(cut), *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    ck = cut/"train/checkpoints"
    wait_paused(p, marker, hang=1800)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert (ck/"step-000001.pt").exists() and not (cut/"train/manifest.json").exists(), "not killed after step 1"
    assert not (ck/"step-000002.pt").exists()
    rc, _, err = rss_run(args + [str(cut), *flags])
    assert rc == 0, err
    got = sample_checkpoint(ck/"step-000002.pt")
    a, b = [r for r in rows_ref if r["split"] == "train"], [r for r in _rows(cut) if r["split"] == "train"]
    assert [r["step"] for r in b] == [1, 2]
    for x, y in zip(a, b):   # the losses of step 1 and of step 2 (after the resumed weights and optimizer)
        assert all(abs(u - v) <= 1e-3 * max(1, abs(u)) for u, v in zip(x["loss_k"], y["loss_k"])), (x, y)
    # the resumed step 2 equals the uninterrupted run's to rounding, tensor by tensor (`compare_resumed`, 08e_resume):
    # per tensor at most a quarter of the sampled weights differ beyond rounding (1e-7, or 2 float32 ulps of the
    # weight) and none by more than 2 × the learning rates of the steps the two runs took apart (both steps: the killed
    # run's step 1 was its own), all finite; AdamW's step equal and its moments within 10 % of their norm; the learning
    # rates equal. AdamW's first steps move every weight by about the warmed-up learning rate whatever its gradient's
    # size, so a rounding that differs flips the sign of a near-zero gradient and moves that weight by a whole step; at
    # these widths on this CPU two processes sometimes round apart (0.6-3.3 % of the sampled weights, pooled, in the
    # runs that did; 11.6 % of one Kimi-K2.5 norm's, in one CI run). Lost moments moved 96 %, a reset step count
    # 77 %: the tiny-drafter test (test_train) plants those, a missing tensor and a NaN, and sees each fail
    lr = sum(r["lr"] for r in a)
    assert [r["lr"] for r in a] == [r["lr"] for r in b]             # the logged learning rates
    figs = compare_resumed(want, got, lr)
    n = sum(t["weight"].numel() for t in want["tensors"].values())
    off = sum(round(f["differ"] * want["tensors"][k]["weight"].numel()) for k, f in figs.items())
    diff = max(f["max_diff"] for f in figs.values())
    top = max(figs, key=lambda k: figs[k]["differ"])                # the tensor nearest the bound: evidence for it
    worst = figs[top]["differ"]
    plan = _plan_need(real, cfg.optim_state, BATCH)                  # what `eagle3nb run CONFIG --plan` prints
    assert abs(plan - step_memory(real["target"], cfg, real["aux"], "cpu")["total"]) < 0.01 * GiB
    with capsys.disabled():
        print(f"\nreal-shape {real['config']}: plan {plan / GiB:.2f} GiB, measured peak RSS {peak / GiB:.2f} GiB "
              f"(optim_state {cfg.optim_state}; float32 AdamW would need {need['float32']['total'] / GiB:.2f} GiB; "
              f"{BATCH} tokens a step; the resumed weights equal the uninterrupted run's at {n - off:,} of {n:,} "
              f"sampled, the largest difference {diff:.1e}; most of one tensor's: {worst:.1%}, {top})")
    assert abs(plan - peak) <= 0.25 * peak, (plan, peak)


def test_two_torchrun_ranks_follow_one_process_at_real_width(real):
    """One step of the Qwen3-8B-shaped drafter: 2 gloo ranks (a record each) = 1 process on both records.
    AdamW's moments in bf16 (optim_state) so that two replicas fit this 23 GiB machine beside each other."""
    if "qwen3" not in real["name"]: pytest.skip("DDP at real width is checked on the Qwen3-8B-shaped drafter")
    t = real["train"]
    flags = ["--ttt_steps", str(t.ttt_steps), "--draft_vocab_size", str(t.draft_vocab_size), "--lr", str(t.lr),
             "--warmup_steps", "1", "--batch_tokens", str(BATCHES["qwen3"]), "--max_steps", "1", "--ckpt_every", "1",
             "--heldout", "0", "--bf16", "always", "--source", "offline", "--optim_state", "bfloat16"]
    one, two = real["dir"]/"one", real["dir"]/"two"
    for d in (one, two): shutil.copytree(real["run"], d)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}      # a thread a rank; the one process has both cores
    r = subprocess.run([str(BIN/"eagle3nb"), "train", "--run", str(one), *flags], capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        str(BIN/"eagle3nb"), "--", "train", "--run", str(two), *flags], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    a, b = (load_checkpoint(d/"train/checkpoints/step-000001.pt") for d in (one, two))
    la, lb = ([r["loss_k"] for r in _rows(d) if r["split"] == "train"][0] for d in (one, two))
    assert all(abs(x - y) <= 1e-3 * max(1, abs(x)) for x, y in zip(la, lb)), (la, lb)   # the same global loss
    for (k, m1), m2 in zip(a["optimizer"]["state"].items(), b["optimizer"]["state"].values()):
        g1, g2 = m1["exp_avg"].float(), m2["exp_avg"].float()   # 0.1 × the summed gradient, stored in bf16
        assert (g1 - g2).abs().max() <= 2e-2 * g1.abs().max(), k   # bf16's 3 digits, summation order aside
    for k, w in a["model"].items():
        d = (w.float() - b["model"][k].float()).abs().max().item()
        assert d <= 2 * t.lr + 1e-6 * w.float().abs().max().item(), (k, d)   # at most one step of lr apart
