"""How fast is tinygpt, measured in one run on one machine, against a reference on the same recipe.

The reference is nanoGPT's own `train.py` on its README's CPU command (`--nanogpt DIR`, a nanoGPT
checkout; its data is prepared from the same Tiny Shakespeare text), run back to back with `python
train.py` on that text; without a checkout, nanoGPT's loop written out around tinygpt's GPT (the "plain
loop") stands in, and the JSON says which. Each program runs ``--rounds`` times, alternating (ABBA), and the
top-level figures are medians: this machine's speed drifts between minutes. One training step is also timed
in this process with the variants taking turns every 10 steps (``step_ab``: ours fused / foreach / torch's
clipping / math attention, and nanoGPT's own GPT and optimizer with --nanogpt), which no drift can skew.
Also measured: time to the first training step, peak memory (/usr/bin/time), KV-cache generation, and the
attention math path against the fused kernel.

    python scripts/benchmark.py --out bench.json                      # plain loop as the reference
    python scripts/benchmark.py --nanogpt ../nanoGPT --out bench.json # nanoGPT itself
    python scripts/benchmark.py --quick --out bench.json              # a few steps of each (tests)
    python scripts/benchmark.py --generate-only
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from tinygpt.data.datamodule import TextDataModule
from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.train.optim import clip_grad_norm_cpu_, lr_at, param_groups

ROOT = Path(__file__).resolve().parents[1]
TINY_SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
BABY = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, dropout=0.0, bias=False)
console = Console()


@torch.no_grad()
def val_loss(model: GPT, dm: TextDataModule, batch: int = 64) -> float:
    model.eval()
    losses = [model(dm.val_x[i : i + batch], dm.val_y[i : i + batch])[1] * len(dm.val_x[i : i + batch])
              for i in range(0, len(dm.val_x), batch)]
    model.train()
    return (torch.stack(losses).sum() / len(dm.val_x)).item()


def train_step(model, opt, x, y, clip=clip_grad_norm_cpu_) -> None:
    """nanoGPT's step: forward, backward, clip the gradient norm to 1, AdamW, zero the gradients. ``clip``:
    train.py's clipping on the CPU (tinygpt.train.module), or torch's (nanoGPT's)."""
    _, loss = model(x, y)
    loss.backward()
    clip(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def plain_loop(dm: TextDataModule, steps: int, seed: int) -> dict:
    """nanoGPT's loop around tinygpt's GPT."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=dm.vocab_size, **BABY))
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99), fused=True)
    data = torch.from_numpy(dm.train_ids.astype("int64"))
    T, B = BABY["block_size"], dm.batch_size
    offsets = torch.arange(T + 1)
    t_train = 0.0
    for step in range(steps):
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, lr=1e-3, min_lr=1e-4, warmup_steps=100, decay_steps=steps)
        ix = torch.randint(len(data) - T, (B,))
        w = data[ix[:, None] + offsets]  # (B, T+1)
        train_step(model, opt, w[:, :-1], w[:, 1:])
        t_train += time.perf_counter() - t0
    return {"tokens_per_sec": steps * B * T / t_train, "val_loss": val_loss(model, dm), "train_seconds": t_train}


def interleaved_steps(nanogpt: Path | None, steps: int = 300, turn: int = 10, seed: int = 0) -> dict:
    """One training step (forward, backward, clipping, AdamW) of the CPU recipe's model in several variants, in
    this process, taking turns every ``turn`` steps on random batches of 12 x 64: the machine's drift falls on
    every variant alike, so their ratios hold where back-to-back runs do not. With a nanoGPT checkout, its own
    GPT and configure_optimizers (foreach AdamW on the CPU) are one of the variants. Median ms per step."""
    import contextlib
    import importlib.util
    import io

    def ours(fused: bool):
        torch.manual_seed(seed)
        model = GPT(GPTConfig(vocab_size=65, **BABY))
        return model, torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99), fused=fused)

    variants = {"tinygpt GPT, fused AdamW (the default)": ours(True), "tinygpt GPT, foreach AdamW": ours(False),
                "tinygpt GPT, torch's clip_grad_norm_": ours(True)}
    clipping = {"tinygpt GPT, torch's clip_grad_norm_": torch.nn.utils.clip_grad_norm_}
    math_model = ours(True)
    for block in math_model[0].blocks:
        block.attn.backend = "math"
    variants["tinygpt GPT, math attention path"] = math_model
    if nanogpt is not None:
        spec = importlib.util.spec_from_file_location("nanogpt_model", nanogpt / "model.py")
        ng = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ng)
        torch.manual_seed(seed)
        with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter counts
            ng_model = ng.GPT(ng.GPTConfig(vocab_size=65, **BABY))
            ng_opt = ng_model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
        variants["nanoGPT's GPT and configure_optimizers"] = (ng_model, ng_opt)
        clipping["nanoGPT's GPT and configure_optimizers"] = torch.nn.utils.clip_grad_norm_
    names = list(variants)
    steps = max(steps, 2 * len(names) * turn)  # each variant's first turn warms up; at least one more is timed
    data = torch.randint(0, 65, (steps, 12, BABY["block_size"] + 1), generator=torch.Generator().manual_seed(seed))
    times: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(steps):
        name = names[(i // turn) % len(names)]
        model, opt = variants[name]
        x, y = data[i, :, :-1].contiguous(), data[i, :, 1:].contiguous()  # (12, 64) each, as get_batch gives
        t0 = time.perf_counter()
        train_step(model, opt, x, y, clipping.get(name, clip_grad_norm_cpu_))
        if i >= len(names) * turn:  # the first turn of each warms up
            times[name].append(time.perf_counter() - t0)
    return {name: 1000 * sorted(t)[len(t) // 2] for name, t in times.items()}


def kept(pair: dict) -> dict:
    """What the JSON keeps of a pair of runs ({side: run}): each side's wall time, tokens/s, peak and val loss."""
    return {side: {k: run.get(k) for k in ("wall_s", "tokens_per_sec", "peak_rss_mib", "val_loss")}
            for side, run in pair.items()}


def median_of(runs: list[dict]) -> dict:
    """Each numeric figure of several runs' dicts as its median (the mean of the middle two for an even count)."""
    out = {}
    for key in runs[0]:
        values = sorted(r[key] for r in runs if isinstance(r.get(key), (int, float)))
        n = len(values)
        out[key] = None if not n else values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
    return out


def timed(cmd: list[str], cwd: Path, env: dict | None = None,
          cpu: int | None = None) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run cmd under /usr/bin/time: (process, wall seconds, peak RSS in MiB). ``cpu``: pinned to that core."""
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    with tempfile.NamedTemporaryFile("r", suffix=".time") as f:
        t0 = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", f.name, *pin, *cmd], cwd=cwd, capture_output=True,
                              text=True, env={**os.environ, **(env or {})})
        wall = time.perf_counter() - t0
        lines = [line for line in Path(f.name).read_text().splitlines() if line.strip().isdigit()]
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd[:3])} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc, wall, int(lines[-1]) / 1024 if lines else float("nan")


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
            "startup_s": s["first_step_unix_time"] - launched}


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
        proc, wall, peak = timed([sys.executable, "train.py", *args], nanogpt, env, cpu)
    iters = [(int(m[1]), float(m[3]) / 1000) for m in map(ITER_LINE.match, proc.stdout.splitlines()) if m]
    times = sorted(dt for i, dt in iters if i > 0)  # iteration 0 includes start-up
    vals = re.findall(r"step \d+: train loss [\d.]+, val loss ([\d.]+)", proc.stdout)
    return {"tokens_per_sec": 12 * 64 / times[len(times) // 2], "wall_s": wall, "peak_rss_mib": peak,
            "val_loss": float(vals[-1]) if vals else None}


ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def side_by_side(nanogpt: Path, text: Path, data_args: list[str], steps: int, seed: int, cache_dir: str,
                 pairs: int) -> list[dict]:
    """Both programs at the same time, each pinned to its own core with one thread, ``pairs`` times with the
    cores swapped between pairs. Whatever the machine's speed does during a pair it does to both, so a pair's
    ratios are free of the drift that moves back-to-back runs (up to 38% here). One thread each is not the
    default's two: this compares the programs' own work (their steps, loops, evaluations, start-up and
    extras), not how each uses two cores."""
    from concurrent.futures import ThreadPoolExecutor

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


def attention_costs(lengths=(64, 256, 1024, 2048), heads: int = 4, head_dim: int = 32) -> dict:
    """Forward + backward time (best of 3) and peak memory of the math path and the fused kernel, batch 1;
    each in its own process, the peak read from /proc (VmHWM, reset after a warm-up step) above the RSS
    before the measured steps (Linux)."""
    out = {}
    for T in lengths:
        for backend in ("math", "sdpa"):
            code = (
                "import time, torch\n"
                "from pathlib import Path\n"
                "from tinygpt.model.attention import CausalSelfAttention\n"
                "def status(key):\n"
                "    line = next(x for x in Path('/proc/self/status').read_text().splitlines() if x.startswith(key))\n"
                "    return int(line.split()[1]) / 1024\n"
                f"a = CausalSelfAttention({heads * head_dim}, {heads}, backend='{backend}')\n"
                f"x = torch.randn(1, {T}, {heads * head_dim}, requires_grad=True)\n"
                "a(x).sum().backward()  # warm up: allocator pools, kernels\n"
                "Path('/proc/self/clear_refs').write_text('5')  # reset the peak (VmHWM) to the current RSS\n"
                "base = status('VmRSS')\n"
                "best = 1e9\n"
                "for _ in range(3):\n"
                "    t0 = time.perf_counter(); a(x).sum().backward(); best = min(best, time.perf_counter() - t0)\n"
                "print(best, status('VmHWM') - base)\n"
            )
            res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            seconds, mib = map(float, res.stdout.split())
            out.setdefault(str(T), {})[backend] = {"fwd_bwd_ms": seconds * 1000, "peak_mib_above_start": mib}
    return out


SMALL = dict(n_layer=6, n_head=6, n_embd=384, block_size=256, dropout=0.0, bias=False)  # the GPU recipe's model


@torch.no_grad()
def generation_speed(arch: dict, new_tokens: int = 200, vocab: int = 65, repeats: int = 2,
                     prompt_len: int = 1) -> dict:
    """Greedy decoding at batch 1 from a ``prompt_len``-token prompt, with and without the KV cache (best
    of ``repeats``); the outputs must be identical."""
    from tinygpt.model.fast_linear import use_fast_decode
    from tinygpt.model.generate import generate

    torch.manual_seed(0)
    model = use_fast_decode(GPT(GPTConfig(vocab_size=vocab, **arch)).eval())
    new_tokens = min(new_tokens, arch["block_size"] - prompt_len)  # within the context: the cache's whole point
    prompt = torch.randint(0, vocab, (1, prompt_len), generator=torch.Generator().manual_seed(0))
    out, best = {}, {}
    for use_cache in (True, False):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out[use_cache] = generate(model, prompt, new_tokens, top_k=1, use_cache=use_cache)
            times.append(time.perf_counter() - t0)
        best[use_cache] = min(times)
    return {"prompt_tokens": prompt_len, "new_tokens": new_tokens,
            "identical": bool(torch.equal(out[True], out[False])),
            "cached_tokens_per_sec": new_tokens / best[True], "uncached_tokens_per_sec": new_tokens / best[False],
            "speedup": best[False] / best[True]}


def matmul_peak_gflops(n: int = 2048, repeats: int = 5) -> float:
    """The fp32 matmul rate this machine reaches on a large square product (best of ``repeats``), with
    torch's default threads: the denominator of MFU."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # warm up
    best = min(_timed_call(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _timed_call(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def baby_flops_per_token(vocab: int = 65) -> float:
    """Training FLOPs per token of the CPU recipe's model (6N + 12 L C T, GPT.flops_per_token)."""
    return GPT(GPTConfig(vocab_size=vocab, **BABY)).flops_per_token()


# One switch at a time against the default recipe, on shorter runs (each its own train.py, back to back).
LEVERS = [
    ("default", [], {}),
    ("progress bar redrawn every step", ["callbacks.progress_bar.refresh_rate=1"], {}),
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


def debug_fast_wall(cache_dir: str) -> float:
    """`python train.py debug=fast` (10 steps, no logger) on the embedded corpus, cache warm, launch to exit."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, str(ROOT / "train.py"), "debug=fast", f"data.cache_dir={cache_dir}",
               f"hydra.run.dir={out}/run"]
        timed(cmd, ROOT)  # warms the cache (the embedded corpus is converted and tokenized once)
        shutil.rmtree(f"{out}/run")
        return timed(cmd, ROOT)[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(TINY_SHAKESPEARE) if TINY_SHAKESPEARE.exists() else None,
                    help="a text file (default: Tiny Shakespeare from ../shared, else the embedded corpus)")
    ap.add_argument("--nanogpt", type=Path, help="a nanoGPT checkout: its own train.py is the reference")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--cache-dir", default=str(ROOT / "data" / "cache"))
    ap.add_argument("--out", "--json", dest="out", help="write the results here as JSON")
    ap.add_argument("--quick", action="store_true", help="a few steps and short sequences (for tests)")
    ap.add_argument("--generate-only", action="store_true", help="only the KV-cache generation benchmark")
    ap.add_argument("--levers", action="store_true", help="also one train.py run per lever (docs/benchmarks.md)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="runs of each program, alternating (ABBA); the JSON's top-level figures are medians")
    ap.add_argument("--lever-steps", type=int, default=500, help="steps of each lever run")
    ap.add_argument("--side-by-side", type=int, default=2, metavar="PAIRS",
                    help="with --nanogpt: run both programs at once, each on its own core with one thread, this "
                         "many times (cores swapped each time; 0: skip): ratios free of the machine's drift")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error(f"--steps={args.steps} must be >= 1.")
    if args.rounds < 1:
        ap.error(f"--rounds={args.rounds} must be >= 1.")
    if args.side_by_side < 0:
        ap.error(f"--side-by-side={args.side_by_side} must be >= 0.")
    if args.nanogpt and args.side_by_side and ((os.cpu_count() or 1) < 2 or not shutil.which("taskset")):
        ap.error("--side-by-side needs 2 cores and taskset (util-linux); pass --side-by-side 0 to skip it.")
    if args.nanogpt and not (args.nanogpt / "train.py").is_file():
        ap.error(f"--nanogpt={args.nanogpt} is not a nanoGPT checkout (no train.py there).")
    if args.nanogpt and not args.data:
        ap.error("--nanogpt needs --data (a text file nanoGPT can prepare as shakespeare_char).")
    steps = 10 if args.quick else args.steps
    new_tokens = 8 if args.quick else 200
    gen = {name: generation_speed(arch, new_tokens) for name, arch in (("small (10.7M, context 256)", SMALL),
                                                                       ("baby (0.8M, context 64)", BABY))}
    # the same 200 new tokens after a 56-token prompt: the context fills to 256, as a chat or a sample does
    gen["small, prompt 56 (context filled)"] = generation_speed(SMALL, new_tokens, prompt_len=8 if args.quick else 56)
    show_generation(gen)
    result: dict = {"generate": gen,
                    "generate_cached_tokens_per_sec": gen["small (10.7M, context 256)"]["cached_tokens_per_sec"],
                    "generate_uncached_tokens_per_sec": gen["small (10.7M, context 256)"]["uncached_tokens_per_sec"]}
    if not args.generate_only:
        data_args = ["data=text_file", f"data.path={args.data}"] if args.data else []
        console.print(f"data: {args.data or 'embedded shakespeare'}; {steps} steps; torch threads "
                      f"{torch.get_num_threads()}")
        if not args.nanogpt:
            dm_kwargs = dict(source="text_file", path=args.data) if args.data else dict(source="shakespeare")
            dm = TextDataModule(**dm_kwargs, block_size=64, batch_size=12, cache_dir=args.cache_dir)
            dm.setup()
        reference = "nanoGPT train.py" if args.nanogpt else \
            "plain loop (nanoGPT's loop around tinygpt's GPT, in this process)"
        rounds = []
        for i in range(args.rounds):  # ABBA: the machine's drift falls on both sides alike
            pair = {}
            for side in (("reference", "tinygpt") if i % 2 == 0 else ("tinygpt", "reference")):
                if side == "tinygpt":
                    pair[side] = tinygpt_run(data_args, steps, args.seed, args.cache_dir)
                elif args.nanogpt:
                    pair[side] = nanogpt_run(args.nanogpt.resolve(), Path(args.data).resolve(), steps)
                else:
                    t0 = time.perf_counter()
                    pair[side] = plain_loop(dm, steps, args.seed)
                    pair[side].update(wall_s=time.perf_counter() - t0, peak_rss_mib=None)
            rounds.append(pair)
            console.print(f"round {i + 1}/{args.rounds}: tinygpt {pair['tinygpt']['wall_s']:.1f} s, "
                          f"{pair['tinygpt']['tokens_per_sec']:,.0f} tokens/s; {reference.split(' (')[0]} "
                          f"{pair['reference']['wall_s']:.1f} s, {pair['reference']['tokens_per_sec']:,.0f} tokens/s")
        ref, ours = (median_of([r[side] for r in rounds]) for side in ("reference", "tinygpt"))
        result["rounds"] = [kept(r) for r in rounds]
        result.update({
            "reference": reference, "reference_tokens_per_sec": ref["tokens_per_sec"],
            "reference_wall_s": ref["wall_s"], "reference_peak_rss_mib": ref["peak_rss_mib"],
            "reference_val_loss": ref.get("val_loss"),
            "lightning_tokens_per_sec": ours["tokens_per_sec"], "wall_s": ours["wall_s"],
            "startup_s": ours["startup_s"], "peak_rss_mib": ours["peak_rss_mib"], "val_loss": ours["val_loss"],
            "steps": steps,
        })
        table = Table(title=f"train.py vs {reference}, {steps} steps, medians of {args.rounds} alternating rounds")
        for col in ("", "tokens/s (median step)", "wall s", "peak RSS MiB", "val loss"):
            table.add_column(col)
        fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        table.add_row(reference.split(" (")[0], fmt(ref["tokens_per_sec"], ",.0f"), fmt(ref["wall_s"], ".1f"),
                      fmt(ref["peak_rss_mib"], ",.0f"), fmt(ref.get("val_loss"), ".4f"))
        table.add_row("tinygpt train.py", fmt(ours["tokens_per_sec"], ",.0f"), fmt(ours["wall_s"], ".1f"),
                      fmt(ours["peak_rss_mib"], ",.0f"), fmt(ours["val_loss"], ".4f"))
        console.print(table)
        console.print(f"tinygpt: first training step {ours['startup_s']:.1f} s after launch; tokens/s ratio "
                      f"{ours['tokens_per_sec'] / ref['tokens_per_sec']:.3f}; wall ratio "
                      f"{ours['wall_s'] / ref['wall_s']:.3f}")
        if args.nanogpt:  # the plain loop bounds Lightning's own cost per step (same model, same windows source)
            dm = TextDataModule(source="text_file", path=args.data, block_size=64, batch_size=12,
                                cache_dir=args.cache_dir)
            dm.setup()
            plain = plain_loop(dm, 20 if args.quick else 300, args.seed)
            result["plain_loop_tokens_per_sec"] = plain["tokens_per_sec"]
            console.print(f"plain loop: {plain['tokens_per_sec']:,.0f} tokens/s (mean of its steps)")
        result["step_ab"] = interleaved_steps(args.nanogpt.resolve() if args.nanogpt else None,
                                              steps=40 if args.quick else 800)
        if args.nanogpt and args.side_by_side:
            pairs = side_by_side(args.nanogpt.resolve(), Path(args.data).resolve(), data_args, steps, args.seed,
                                 args.cache_dir, args.side_by_side)
            ratios = median_of([{k: p["tinygpt"][k] / p["reference"][k] for k in ("wall_s", "tokens_per_sec")}
                                for p in pairs])  # the median pair's ratios
            result.update({"side_by_side": pairs, "side_by_side_wall_ratio": ratios["wall_s"],
                           "side_by_side_tokens_per_sec_ratio": ratios["tokens_per_sec"]})
            console.print(f"side by side: wall ratio {result['side_by_side_wall_ratio']:.3f}, tokens/s ratio "
                          f"{result['side_by_side_tokens_per_sec_ratio']:.3f} (medians over the pairs)")
        table = Table(title="one training step in this process, variants taking turns every 10 steps")
        for col in ("variant", "ms/step (median)", "vs the default"):
            table.add_column(col)
        base = next(iter(result["step_ab"].values()))
        for name, ms in result["step_ab"].items():
            table.add_row(name, f"{ms:.2f}", f"{ms / base:.3f}")
        console.print(table)
        peak = matmul_peak_gflops(512 if args.quick else 2048)
        fpt = baby_flops_per_token()
        result.update({"matmul_peak_gflops": peak, "flops_per_token": fpt,
                       "mfu": ours["tokens_per_sec"] * fpt / (peak * 1e9),
                       "reference_mfu": ref["tokens_per_sec"] * fpt / (peak * 1e9),
                       "debug_fast_wall_s": debug_fast_wall(args.cache_dir)})
        console.print(f"MFU: tinygpt {result['mfu']:.1%}, reference {result['reference_mfu']:.1%} of "
                      f"{peak:.0f} GFLOP/s (a {512 if args.quick else 2048}^3 fp32 matmul here); "
                      f"debug=fast {result['debug_fast_wall_s']:.1f} s")
        if args.levers:
            result["levers"] = levers(data_args, 20 if args.quick else args.lever_steps, args.seed, args.cache_dir,
                                      args.quick)
            result["lever_steps"] = 20 if args.quick else args.lever_steps
        result["attention"] = attention_costs((64, 256) if args.quick else (64, 256, 1024, 2048))
        table = Table(title="attention forward + backward, batch 1, 4 heads of 32: math path vs fused kernel")
        for col in ("T", "math ms", "sdpa ms", "math MiB", "sdpa MiB"):
            table.add_column(col)
        for T, r in result["attention"].items():
            table.add_row(T, f"{r['math']['fwd_bwd_ms']:.2f}", f"{r['sdpa']['fwd_bwd_ms']:.2f}",
                          f"{r['math']['peak_mib_above_start']:.0f}", f"{r['sdpa']['peak_mib_above_start']:.0f}")
        console.print(table)
    from tinygpt.model.fast_linear import FastDecodeLinear
    result["decode_linear"] = {"max_rows": FastDecodeLinear.max_rows,
                               "min_weight_elements": FastDecodeLinear.min_weight_elements}
    result["machine"] = machine()
    result["command"] = "python scripts/benchmark.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


def machine() -> str:
    """Cores, CPU model, memory, torch: what the numbers were measured on."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown CPU") if Path("/proc/cpuinfo").exists() else "unknown CPU"
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{os.cpu_count()} cores ({model}, {simd}), {mem:.0f} GiB, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, fp32")


def show_generation(gen: dict) -> None:
    table = Table(title="greedy generation at batch 1, KV cache vs recomputing the context")
    for col in ("model", "prompt", "new tokens", "cached tokens/s", "uncached tokens/s", "speedup", "identical"):
        table.add_column(col)
    for name, g in gen.items():
        table.add_row(name, str(g["prompt_tokens"]), str(g["new_tokens"]), f"{g['cached_tokens_per_sec']:,.0f}",
                      f"{g['uncached_tokens_per_sec']:,.0f}", f"{g['speedup']:.1f}x", str(g["identical"]))
    console.print(table)


if __name__ == "__main__":
    sys.exit(main())
