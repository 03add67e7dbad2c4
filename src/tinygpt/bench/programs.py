"""Whole programs, timed from outside: ``python train.py`` and nanoGPT's own train.py on the same recipe, in
alternating rounds and side by side (each pinned to its own core with one thread, cores swapped between pairs,
so whatever the machine does during a pair it does to both), the levers (one train.py run per switch) and the
wall time of ``debug=fast``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parents[3]  # the checkout that holds train.py
console = Console()

def kept(pair: dict) -> dict:
    """What the JSON keeps of a pair of runs ({side: run}): each side's wall time, tokens/s, peak and val loss."""
    return {side: {k: run.get(k) for k in ("wall_s", "tokens_per_sec", "peak_rss_mib", "val_loss", "startup_s",
                                           "first_step_peak_rss_mib")}
            for side, run in pair.items()}


def median_of(runs: list[dict]) -> dict:
    """Each numeric figure of several runs' dicts as its median (the mean of the middle two for an even count)."""
    out = {}
    for key in runs[0]:
        values = sorted(r[key] for r in runs if isinstance(r.get(key), (int, float)))
        n = len(values)
        out[key] = None if not n else values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
    return out


def timed(cmd: list[str], cwd: Path, env: dict | None = None, cpu: int | None = None,
          watch: str | None = None) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run cmd under /usr/bin/time: (process, wall seconds, peak RSS in MiB). ``cpu``: pinned to that core.
    ``watch``: a regex; the process gets ``seen_at``, the wall clock (time.time()) when a line of its output first
    matched (its output read as it comes, unbuffered)."""
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    with tempfile.NamedTemporaryFile("r", suffix=".time") as f, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        child = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", f.name, *pin, *cmd], cwd=cwd, text=True,
                                 stdout=subprocess.PIPE, stderr=err,
                                 env={**os.environ, **({"PYTHONUNBUFFERED": "1"} if watch else {}), **(env or {})})
        lines, seen_at = [], None
        for line in child.stdout:
            if seen_at is None and watch and re.match(watch, line):
                seen_at = time.time()
            lines.append(line)
        child.wait()
        wall = time.perf_counter() - t0
        err.seek(0)
        proc = subprocess.CompletedProcess(cmd, child.returncode, "".join(lines), err.read())
        proc.seen_at = seen_at
        peaks = [line for line in Path(f.name).read_text().splitlines() if line.strip().isdigit()]
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd[:3])} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc, wall, int(peaks[-1]) / 1024 if peaks else float("nan")


def tinygpt_run(data_args: list[str], steps: int, seed: int, cache_dir: str, extra: list[str] = (),
                env: dict | None = None, cpu: int | None = None) -> dict:
    """`python train.py` on the default recipe as a user runs it, W&B offline, maps and samples included."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, str(ROOT / "train.py"), *data_args, f"seed={seed}", f"trainer.max_steps={steps}",
               f"data.cache_dir={cache_dir}", f"hydra.run.dir={out}/run", *extra]
        launched = time.time()
        _, wall, peak = timed(cmd, ROOT, {"WANDB_MODE": "offline", **(env or {})}, cpu)
        s = json.loads((Path(out) / "run" / "summary.json").read_text())
    tokens_per_step = 12 * 64
    return {"tokens_per_sec": tokens_per_step / s["step_seconds_median"],
            "mean_tokens_per_sec": s["tokens_per_sec"], "val_loss": s["val_loss"], "train_loss": s["train_loss"],
            "train_seconds": s["train_seconds"], "wall_s": wall, "peak_rss_mib": peak,
            "startup_s": s["first_step_unix_time"] - launched,
            "first_step_peak_rss_mib": s.get("first_step_peak_rss_mib")}


def warm_token_cache(data_args: list[str], cache_dir: str) -> None:
    """train.py's token cache for ``data_args``, written before any timed run (as nanoGPT's prepare.py runs before
    its train.py): a timed run then starts as every later run of the same data does. ``debug=fast``: 10 steps."""
    with tempfile.TemporaryDirectory() as out:
        timed([sys.executable, str(ROOT / "train.py"), *data_args, "debug=fast", f"data.cache_dir={cache_dir}",
               f"hydra.run.dir={out}/run"], ROOT)


def import_floors(repeats: int = 3) -> dict:
    """What any program pays before its first line of work, for each of FLOORS (``import torch``: nanoGPT's floor;
    ``import lightning``: any Lightning program's; ``import hydra``: a refusal's), launch to exit (median of
    ``repeats``) and peak resident size (the largest), keyed by the code run."""
    out = {}
    for code in FLOORS.values():
        runs = [timed([sys.executable, "-c", code], ROOT)[1:] for _ in range(repeats)]
        out[code] = {"wall_s": sorted(w for w, _ in runs)[len(runs) // 2], "peak_rss_mib": max(m for _, m in runs)}
        console.print(f"{code}: {out[code]['wall_s']:.2f} s, {out[code]['peak_rss_mib']:.0f} MiB")
    return out


def startup_pairs(data_args: list[str], seed: int, cache_dir: str, repeats: int = 3) -> list[dict]:
    """Launch to the first training step of ``python train.py`` (a 2-step run of the default recipe) right after
    ``python -c 'import lightning'`` launch to exit, ``repeats`` times in turn: the start-up's cost over any
    Lightning program's floor, each pair measured within seconds of itself (a single start-up and a floor taken
    minutes apart differed by the machine's drift, up to ~0.5 s here)."""
    pairs = []
    for _ in range(repeats):
        floor = timed([sys.executable, "-c", "import lightning"], ROOT)[1]
        pairs.append({"import_lightning_s": floor,
                      "startup_s": tinygpt_run(data_args, 2, seed, cache_dir)["startup_s"]})
        console.print(f"start-up: import lightning {floor:.2f} s, train.py to its first step "
                      f"{pairs[-1]['startup_s']:.2f} s")
    return pairs


# A small sweep timed both ways: experiment 1's recipe on two arms, causal and leaky, 2 seeds (8 jobs).
SWEEP = ["experiment=causal_mask", "arm/causal_mask=shakespeare_t64,random_t64", "model.attn.causal=true,false",
         "seed=1,2"]
LAUNCHERS = {"one by one": "hydra/launcher=basic", "at once": "hydra/launcher=parallel"}


SWEEP_QUICK = ["experiment=causal_mask", "arm/causal_mask=random_t64", "model.attn.causal=true,false", "seed=1",
               "model=tiny", "data.batch_size=4", "data.val_windows=32", "diagnostics.windows=4"]  # 2 jobs (tests)


def sweep_run(launcher: str, steps: int, cache_dir: str, sweep: list[str] = SWEEP) -> dict:
    """``python train.py -m`` of SWEEP with ``launcher``, W&B offline as a user runs it: wall time from the
    command to its exit, jobs per hour, tokens per second summed over jobs (all tokens trained / wall), and
    each job's final losses (to compare the two ways)."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, str(ROOT / "train.py"), "-m", *sweep, launcher, f"trainer.max_steps={steps}",
               f"data.cache_dir={cache_dir}", f"hydra.sweep.dir={out}/sweep"]
        _, wall, _ = timed(cmd, ROOT, {"WANDB_MODE": "offline"})
        summaries = [json.loads(p.read_text()) for p in sorted(Path(out).glob("sweep/*/summary.json"),
                                                               key=lambda p: int(p.parent.name))]
    tokens = sum(s["steps"] * s["config"]["data"]["batch_size"] * s["config"]["model"]["block_size"]
                 for s in summaries)
    return {"wall_s": wall, "jobs": len(summaries), "jobs_per_hour": 3600 * len(summaries) / wall,
            "tokens_per_sec": tokens / wall, "threads_per_job": summaries[0]["threads"],
            "job_tokens_per_sec": [s["tokens_per_sec"] for s in summaries],
            "val_loss": [s["val_loss"] for s in summaries], "train_loss": [s["train_loss"] for s in summaries]}


def sweep_comparison(steps: int, cache_dir: str, sweep: list[str] = SWEEP) -> dict:
    """The same small sweep one job after another and with its jobs at once, back to back; the largest
    difference of any job's final losses between the two ways (other thread counts sum in another order)."""
    runs = {name: sweep_run(launcher, steps, cache_dir, sweep) for name, launcher in LAUNCHERS.items()}
    one, many = runs["one by one"], runs["at once"]
    diff = max(abs(a - b) for key in ("val_loss", "train_loss") for a, b in zip(one[key], many[key], strict=True))
    console.print(f"sweep of {one['jobs']} jobs x {steps} steps: one by one {one['wall_s']:.1f} s, at once "
                  f"{many['wall_s']:.1f} s ({one['wall_s'] / many['wall_s']:.2f}x); losses differ by at most "
                  f"{diff:.2g}")
    return {"command": " ".join(["python train.py -m", *sweep, f"trainer.max_steps={steps}"]), "steps": steps,
            "runs": runs, "speedup": one["wall_s"] / many["wall_s"], "max_loss_difference": diff}


NANOGPT_CPU = ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
               "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128",
               "--lr_decay_iters={steps}", "--max_iters={steps}", "--dropout=0.0"]  # nanoGPT README's CPU command
ITER_LINE = re.compile(r"^iter (\d+): loss ([\d.]+), time ([\d.]+)ms")


def prepare_nanogpt_data(nanogpt: Path, text: Path) -> None:
    """nanoGPT's shakespeare_char data (train.bin, val.bin, meta.pkl) from ``text``, unless already there."""
    data_dir = nanogpt / "data" / "shakespeare_char"
    if not (data_dir / "train.bin").exists() or (data_dir / "input.txt").read_text() != text.read_text():
        shutil.copy(text, data_dir / "input.txt")
        subprocess.run([sys.executable, "prepare.py"], cwd=data_dir, check=True, capture_output=True)


def nanogpt_run(nanogpt: Path, text: Path, steps: int, env: dict | None = None, cpu: int | None = None) -> dict:
    """nanoGPT's train.py on its README's CPU command, its data prepared from ``text``."""
    prepare_nanogpt_data(nanogpt, text)
    with tempfile.TemporaryDirectory() as out:
        args = [a.format(steps=steps) for a in NANOGPT_CPU] + [f"--out_dir={out}"]
        launched = time.time()
        proc, wall, peak = timed([sys.executable, "train.py", *args], nanogpt, env, cpu, watch=r"iter 0: ")
    iters = [(int(m[1]), float(m[3]) / 1000) for m in map(ITER_LINE.match, proc.stdout.splitlines()) if m]
    times = sorted(dt for i, dt in iters if i > 0)  # iteration 0 includes start-up
    vals = re.findall(r"step \d+: train loss [\d.]+, val loss ([\d.]+)", proc.stdout)
    step = times[len(times) // 2]
    # its first step began one step before its "iter 0" line (its evaluation at iter 0 runs before that step)
    startup = None if proc.seen_at is None else proc.seen_at - step - launched
    return {"tokens_per_sec": 12 * 64 / step, "wall_s": wall, "peak_rss_mib": peak,
            "val_loss": float(vals[-1]) if vals else None, "startup_s": startup}


ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def side_by_side(nanogpt: Path, text: Path, data_args: list[str], steps: int, seed: int, cache_dir: str,
                 pairs: int) -> list[dict]:
    """Both programs at the same time, each pinned to its own core with one thread, ``pairs`` times with the
    cores swapped between pairs. Whatever the machine's speed does during a pair it does to both, so a pair's
    ratios are free of the drift that moves back-to-back runs (up to 38% here). One thread each is not the
    default's two: this compares the programs' own work (their steps, loops, evaluations, start-up and
    extras), not how each uses two cores."""

    prepare_nanogpt_data(nanogpt, text)  # before the clock starts for either
    out = []
    for i in range(pairs):
        ours_cpu, ref_cpu = (0, 1) if i % 2 == 0 else (1, 0)
        with ThreadPoolExecutor(max_workers=2) as pool:  # each thread waits on its own subprocess
            ours = pool.submit(tinygpt_run, data_args, steps, seed, cache_dir, env=ONE_THREAD, cpu=ours_cpu)
            ref = pool.submit(nanogpt_run, nanogpt, text, steps, env=ONE_THREAD, cpu=ref_cpu)
            pair = {"tinygpt": ours.result(), "reference": ref.result()}
        out.append({**kept(pair), "tinygpt_core": ours_cpu, "reference_core": ref_cpu})
        ours_r, ref_r = pair["tinygpt"], pair["reference"]
        console.print(f"side by side {i + 1}/{pairs} (tinygpt on core {ours_cpu}, nanoGPT on core {ref_cpu}, one "
                      f"thread each): tinygpt {ours_r['wall_s']:.1f} s, {ours_r['tokens_per_sec']:,.0f} tokens/s; "
                      f"nanoGPT {ref_r['wall_s']:.1f} s, {ref_r['tokens_per_sec']:,.0f} tokens/s")
    return out


LEVERS = [
    ("default", [], {}),
    ("progress bar redrawn once a second", ["callbacks.progress_bar.refresh_rate=1"], {}),
    ("no heap trim", ["~callbacks.heap_trim"], {}),
    ("no periodic attention maps", ["callbacks.attention_maps.every_n_steps=0"], {}),
    ("validation twice as often", ["trainer.val_check_interval=125"], {}),
    ("no loggers (W&B, CSV)", ["logger=none"], {}),
    ("AdamW foreach instead of fused", ["optim.fused_adam=false"], {}),
    ("one thread", [], {"OMP_NUM_THREADS": "1"}),
    ("torch.compile (compile time counted)", ["compile=true"], {}),
]


def levers(data_args: list[str], steps: int, seed: int, cache_dir: str, quick: bool) -> list[dict]:
    """Each lever as a train.py run of ``steps`` steps (validation every steps/2, maps every steps/2)."""
    rows = []
    for name, overrides, env in LEVERS[:2] if quick else LEVERS:
        extra = [f"trainer.val_check_interval={max(1, steps // 2)}",
                 f"callbacks.attention_maps.every_n_steps={max(1, steps // 2)}", *overrides]
        if name == "validation twice as often":
            extra = [o for o in extra if not o.startswith("trainer.val_check_interval=")] + [
                f"trainer.val_check_interval={max(1, steps // 4)}"]
        r = tinygpt_run(data_args, steps, seed, cache_dir, extra, env)
        rows.append({"lever": name, "overrides": overrides, "env": env, "wall_s": r["wall_s"],
                     "step_ms": 1000 * 12 * 64 / r["tokens_per_sec"], "peak_rss_mib": r["peak_rss_mib"],
                     "train_loss": r["train_loss"], "val_loss": r["val_loss"]})
        console.print(f"lever {name}: {rows[-1]['wall_s']:.1f} s wall, {rows[-1]['step_ms']:.1f} ms/step, "
                      f"{rows[-1]['peak_rss_mib']:.0f} MiB, train loss {r['train_loss']:.4f}")
    return rows


REFUSALS = ("model.n_head=5", "trainer.max_steps=-1", "data.batch_size=0", "callbacks.leak_alarm.action=shout",
            "ckpt_path=/nonexistent", "init_from=/nonexistent", "data.tokenizer=bpe data.bpe_vocab_size=1",
            "corpus=random_tokens corpus.n_tokens=100000000000", "corpus=text_file corpus.path=five.txt",
            "ckpt_path=notes.zip", "ckpt_path=last hydra.run.dir=killed", "ckpt_path=last hydra.run.dir=early",
            "hydra.run.dir=early", "ckpt_path=lst", "optim.lr=-1", "-m model.dropout=0.1,1.5")  # bad values, each
# refused in one line, exit 2 (the files: made in the scratch dir by refusal_files; killed: a run dir killed before
# its first checkpoint; early: one killed before it wrote its config.yaml, Hydra's files alone)
SCRIPT_REFUSALS = (  # the scripts' refusals answered by a file's layout, a checkpoint's pickle or the Hub's reach
    "scripts/sample.py --ckpt notes.zip", "HF_HUB_OFFLINE=1 scripts/sample.py --init_from gpt2",
    "scripts/sample.py --ckpt text.ckpt --prompt ''", "scripts/sample.py --ckpt ids.ckpt --prompt ROMEO:",
    "scripts/attention.py --ckpt ids.ckpt --text hello", "scripts/export_hf.py --ckpt leaky.ckpt --out exported",
    "scripts/export_hf.py --ckpt patched.ckpt --out exported", "scripts/report.py causal_mask stranger",
    "scripts/report.py causal_mask stranger --out mine",
    "scripts/attention.py --ckpt text.ckpt --text hello --out notes.txt")
FLOORS = {"python -c 'import hydra'": "import hydra", "python -c 'import torch'": "import torch",
          "python -c 'import lightning'": "import lightning"}


def refusal_files(scratch: Path) -> None:
    """The files REFUSALS and SCRIPT_REFUSALS name: a corpus too short for any split, a zip that is not a checkpoint,
    run dirs killed before their first checkpoint, a stranger's dir, a user's files, and small checkpoints (a token-id
    model, a character model, one trained without the causal mask, one with experiment 3's off_by_one patch) whose
    settings refuse them."""
    import torch

    from tinygpt.data.tokenizer import train_tokenizer

    (scratch / "five.txt").write_text("hello")
    with zipfile.ZipFile(scratch / "notes.zip", "w") as z:
        z.writestr("notes/a.txt", "hello")
    (scratch / "killed" / ".hydra").mkdir(parents=True)
    (scratch / "killed" / "config.yaml").write_text("seed: 1337\n")  # set-up had written it; no checkpoint yet
    (scratch / "early" / ".hydra").mkdir(parents=True)  # killed before set-up wrote anything: Hydra's files alone
    (scratch / "early" / ".hydra" / "overrides.yaml").write_text("- seed=7\n")
    (scratch / "early" / "train.log").write_text("")
    (scratch / "stranger").mkdir()  # a dir whose summary.json is not a run's
    (scratch / "stranger" / "summary.json").write_text('{"accuracy": 0.9}')
    (scratch / "mine").mkdir()  # a user's own files, not a report's
    (scratch / "mine" / "README.md").write_text("mine\n")
    (scratch / "notes.txt").write_text("notes\n")  # a user's file, not an attention page
    model = {"block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 16}
    bug = {"_target_": "tinygpt.experiments.partial_leaks.bugs.AttentionBug", "kind": "off_by_one"}
    for name, extra, tokenizer in [
            ("ids", {}, None), ("text", {}, train_tokenizer("char", ["hello world"]).to_str()),
            ("leaky", {"attn": {"causal": False}}, None), ("patched", {"patch": [bug]}, None)]:
        ckpt = {"state_dict": {"model.lm_head.weight": torch.zeros(64, 16)}, "global_step": 60,
                "hyper_parameters": {"model": {**model, **extra}, "vocab_size": 64}}  # read without torch, never loaded
        if tokenizer is not None:
            ckpt["tokenizer"] = tokenizer
        torch.save(ckpt, scratch / f"{name}.ckpt")


def script_command(refusal: str) -> tuple[list[str], dict]:
    """A SCRIPT_REFUSALS entry as (argv, the environment's additions): its leading NAME=value words are the
    environment, the rest a script of this checkout and its arguments."""
    import shlex

    words = shlex.split(refusal)
    env = {}
    while "=" in words[0]:
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    return [sys.executable, str(ROOT / words[0]), *words[1:]], env


def refusal_times(repeats: int = 3, floors: dict | None = None) -> dict:
    """The time from a typo to its one-line error: launch to exit of ``python train.py <bad value>`` and of the
    scripts' SCRIPT_REFUSALS (exit 2, in a scratch dir), the median of ``repeats``, and its CPU time (user + sys,
    the median: a figure a loaded machine inflates less than the wall), beside the imports that bound it (Hydra's:
    the floor for any check of a composed config; torch's and Lightning's: what a refusal after them would cost):
    ``floors``, import_floors' measures when this run took them, else measured here."""
    import resource

    cpu = {}

    def median_wall(name: str, cmd: list[str], cwd: str, code: int, env: dict | None = None) -> float:
        walls, cpus = [], []
        for _ in range(repeats):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                                  env={**os.environ, "WANDB_MODE": "offline", **(env or {})})
            walls.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if proc.returncode != code:
                raise SystemExit(f"{' '.join(cmd[1:])} exited {proc.returncode}, expected {code}:\n"
                                 f"{proc.stderr[-2000:]}")
        cpu[name] = sorted(cpus)[len(cpus) // 2]
        return sorted(walls)[len(walls) // 2]

    with tempfile.TemporaryDirectory() as scratch:
        refusal_files(Path(scratch))
        refusals = {o: median_wall(o, [sys.executable, str(ROOT / "train.py"), *o.split()], scratch, 2)
                    for o in REFUSALS}
        hub = {"HF_HUB_CACHE": str(Path(scratch) / "hf")}  # an empty cache: the Hub name is refused, not found
        scripts = {}
        for o in SCRIPT_REFUSALS:
            argv, env = script_command(o)
            scripts[o] = median_wall(o, argv, scratch, 2, {**hub, **env})
        floors = ({cmd: floors[code]["wall_s"] for cmd, code in FLOORS.items()} if floors else
                  {cmd: median_wall(cmd, [sys.executable, "-c", code], scratch, 0) for cmd, code in FLOORS.items()})
    for name, wall in {**refusals, **scripts, **floors}.items():
        console.print(f"{name}: {wall:.2f} s" + (f" ({cpu[name]:.2f} s CPU)" if name in cpu else ""))
    return {"repeats": repeats, "train_py": refusals, "scripts": scripts, "floors": floors, "cpu_s": cpu}


def debug_fast_wall(cache_dir: str) -> float:
    """`python train.py debug=fast` (10 steps, no logger) on the embedded corpus, cache warm, launch to exit."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, str(ROOT / "train.py"), "debug=fast", f"data.cache_dir={cache_dir}",
               f"hydra.run.dir={out}/run"]
        timed(cmd, ROOT)  # warms the cache (the embedded corpus is converted and tokenized once)
        shutil.rmtree(f"{out}/run")
        return timed(cmd, ROOT)[1]


def _hf_pair(size: str, whats: tuple[str, ...], cores: dict[str, int]) -> dict:
    """Both sides of one transformers comparison at once: each its own process (tinygpt.bench.micro.hf_worker),
    pinned to its own core with one thread; before each timed part both are held until both are ready, then
    started together. Returns {side: {what: result}} and, under "other_processes_cores", the CPU that other
    processes used meanwhile."""
    from tinygpt.bench.micro import OtherLoad

    with OtherLoad() as load:
        out = _hf_processes(size, whats, cores)
    return {**out, "other_processes_cores": load.cores}


def _hf_processes(size: str, whats: tuple[str, ...], cores: dict[str, int]) -> dict:
    procs, errs = {}, {}
    for side, core in cores.items():
        args = json.dumps({"side": side, "size": size, "whats": list(whats)})
        code = "import sys; from tinygpt.bench.micro import hf_worker_main; hf_worker_main(sys.argv[1])"
        errs[side] = tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty side cannot block on it
        procs[side] = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", code, args], cwd=ROOT,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errs[side],
                                       text=True, env={**os.environ, **ONE_THREAD, "TRANSFORMERS_VERBOSITY": "error"})

    def failed(side: str, line: str = "") -> SystemExit:
        procs[side].kill()
        procs[side].wait()
        errs[side].seek(0)
        return SystemExit(f"the {side} side of the transformers comparison failed:\n{line}{errs[side].read()[-3000:]}")

    try:
        for _ in whats:
            for side, p in procs.items():  # each says "ready" before its timed part
                line = p.stdout.readline()
                if line.strip() != "ready":
                    raise failed(side, line)
            for p in procs.values():
                p.stdin.write("go\n")
                p.stdin.flush()
        out = {}
        with ThreadPoolExecutor(max_workers=2) as pool:
            done = {side: pool.submit(p.communicate) for side, p in procs.items()}
            for side, fut in done.items():
                stdout, _ = fut.result()
                if procs[side].returncode:
                    raise failed(side)
                out[side] = json.loads(stdout.strip().splitlines()[-1])
        return out
    finally:
        for side, p in procs.items():
            if p.poll() is None:
                p.kill()
                p.wait()
            errs[side].close()


def hf_side_by_side(sizes: list[str], pairs: int = 2) -> dict:
    """Our GPT against transformers' GPT2LMHeadModel on the same random weights: a training step's tokens/s and
    cached greedy decoding's tokens/s at each of ``sizes`` (tinygpt.bench.micro.HF_SIZES), both programs at once,
    each on its own core with one thread, ``pairs`` times with the cores swapped; the ratios are medians over the
    pairs, and the greedy tokens of the two sides are compared."""
    whats = ("train", "decode")
    results = {}
    for size in sizes:
        runs: dict[str, list] = {what: [] for what in whats}
        for i in range(pairs):
            cores = {"tinygpt": 0, "transformers": 1} if i % 2 == 0 else {"tinygpt": 1, "transformers": 0}
            pair = _hf_pair(size, whats, cores)
            for what in whats:
                ours, theirs = pair["tinygpt"][what], pair["transformers"][what]
                run = {side: {k: v for k, v in pair[side][what].items() if k != "tokens"} | {"core": cores[side]}
                       for side in cores}
                run["other_processes_cores"] = pair["other_processes_cores"]
                if what == "decode":
                    same = [a == b for a, b in zip(ours["tokens"], theirs["tokens"], strict=True)]
                    run["identical_tokens"] = all(same)
                    run["tokens_equal_before_first_difference"] = same.index(False) if False in same else len(same)
                runs[what].append(run)
                console.print(f"{size} {what}, pair {i + 1}/{pairs} (tinygpt on core {cores['tinygpt']}): tinygpt "
                              f"{ours['tokens_per_sec']:,.1f} tokens/s, transformers {theirs['tokens_per_sec']:,.1f} "
                              f"tokens/s ({ours['tokens_per_sec'] / theirs['tokens_per_sec']:.2f}x)"
                              + (f"; same greedy tokens: {run['identical_tokens']}" if what == "decode" else ""))
        for what in whats:
            ratios = sorted(r["tinygpt"]["tokens_per_sec"] / r["transformers"]["tokens_per_sec"] for r in runs[what])
            n = len(ratios)
            results.setdefault(size, {})[what] = {
                "pairs": runs[what],
                "ratio": ratios[n // 2] if n % 2 else (ratios[n // 2 - 1] + ratios[n // 2]) / 2,
                "tinygpt_tokens_per_sec": median_of([r["tinygpt"] for r in runs[what]])["tokens_per_sec"],
                "transformers_tokens_per_sec": median_of([r["transformers"] for r in runs[what]])["tokens_per_sec"],
            }
    return results
