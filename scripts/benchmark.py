"""Speed and loss of `python train.py` against a plain PyTorch loop, in one run on one machine.

The plain loop is nanoGPT's training loop written out (torch.randint windows, warmup + cosine LR,
AdamW with decay on 2-D weights, grad clip 1.0) around the same GPT. Both are scored with the same
validation windows, so the ratio of tokens/s is the cost (or gain) of the Lightning pipeline and
the val losses show whether it trains the same.

    python scripts/benchmark.py                       # Tiny Shakespeare if ../shared has it, else the embedded corpus
    python scripts/benchmark.py --steps 300 --seeds 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from tinygpt.data import TextDataModule
from tinygpt.model import GPT, GPTConfig
from tinygpt.module import lr_at, param_groups

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
        _, loss = model(w[:, :-1], w[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t_train += time.perf_counter() - t0
    return {"tokens_per_sec": steps * B * T / t_train, "val_loss": val_loss(model, dm), "train_seconds": t_train}


def tinygpt_run(data_args: list[str], steps: int, seed: int, cache_dir: str) -> dict:
    """`python train.py` as a user runs it, minus W&B; timing excludes validation and callbacks."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, str(ROOT / "train.py"), *data_args, "logger=none", f"seed={seed}",
               f"trainer.max_steps={steps}", f"data.cache_dir={cache_dir}", f"hydra.run.dir={out}",
               "callbacks.text_samples.max_new_tokens=0"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode:
            raise SystemExit(f"train.py failed:\n{proc.stderr[-3000:]}")
        s = json.loads((Path(out) / "summary.json").read_text())
    return {"tokens_per_sec": s["tokens_per_sec"], "val_loss": s["val_loss"], "train_seconds": s["train_seconds"],
            "wall_seconds": wall}


SMALL = dict(n_layer=6, n_head=6, n_embd=384, block_size=256, dropout=0.0, bias=False)  # the GPU recipe's model


@torch.no_grad()
def generation_speed(arch: dict, new_tokens: int = 200, vocab: int = 65, repeats: int = 2) -> dict:
    """Greedy decoding at batch 1 from a 1-token prompt, with and without the KV cache (best of
    ``repeats``); the outputs must be identical."""
    from tinygpt.generate import generate

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=vocab, **arch)).eval()
    new_tokens = min(new_tokens, arch["block_size"] - 1)  # within the context: the cache's whole point
    prompt = torch.zeros(1, 1, dtype=torch.long)
    out, best = {}, {}
    for use_cache in (True, False):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out[use_cache] = generate(model, prompt, new_tokens, top_k=1, use_cache=use_cache)
            times.append(time.perf_counter() - t0)
        best[use_cache] = min(times)
    return {"new_tokens": new_tokens, "identical": bool(torch.equal(out[True], out[False])),
            "cached_tokens_per_sec": new_tokens / best[True], "uncached_tokens_per_sec": new_tokens / best[False],
            "speedup": best[False] / best[True]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(TINY_SHAKESPEARE) if TINY_SHAKESPEARE.exists() else None,
                    help="a text file (default: Tiny Shakespeare from ../shared, else the embedded corpus)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1337])
    ap.add_argument("--cache-dir", default="data/cache")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--generate-only", action="store_true", help="only the KV-cache generation benchmark")
    args = ap.parse_args(argv)
    gen = {name: generation_speed(arch) for name, arch in (("small (10.7M, context 256)", SMALL),
                                                           ("baby (0.8M, context 64)", BABY))}
    table = Table(title="greedy generation at batch 1, KV cache vs recomputing the context")
    for col in ("model", "new tokens", "cached tokens/s", "uncached tokens/s", "speedup", "identical"):
        table.add_column(col)
    for name, g in gen.items():
        table.add_row(name, str(g["new_tokens"]), f"{g['cached_tokens_per_sec']:,.0f}",
                      f"{g['uncached_tokens_per_sec']:,.0f}", f"{g['speedup']:.1f}x", str(g["identical"]))
    console.print(table)
    if args.generate_only:
        if args.json:
            Path(args.json).write_text(json.dumps({"generate": gen}, indent=2))
        return 0
    if args.steps < 1:
        ap.error(f"--steps={args.steps} must be >= 1.")
    data_args = ["data=text_file", f"data.path={args.data}"] if args.data else []
    dm_kwargs = dict(source="text_file", path=args.data) if args.data else dict(source="shakespeare")
    dm = TextDataModule(**dm_kwargs, block_size=64, batch_size=12, cache_dir=args.cache_dir)
    dm.setup()
    console.print(f"data: {args.data or 'embedded shakespeare'}; {args.steps} steps; seeds {args.seeds}; "
                  f"torch threads {torch.get_num_threads()}")
    rows = {"plain loop": [], "tinygpt (train.py)": []}
    for seed in args.seeds:  # alternate, so drift in machine speed hits both alike
        rows["plain loop"].append(plain_loop(dm, args.steps, seed))
        console.print(f"seed {seed} plain loop: {rows['plain loop'][-1]}")
        rows["tinygpt (train.py)"].append(tinygpt_run(data_args, args.steps, seed, args.cache_dir))
        console.print(f"seed {seed} train.py:   {rows['tinygpt (train.py)'][-1]}")
    table = Table(title="tinygpt vs a plain PyTorch loop (same model, same validation windows)")
    for col in ("run", "tokens/s", "ratio to plain", "val loss (mean)", "val loss (each seed)"):
        table.add_column(col)
    base = statistics.mean(r["tokens_per_sec"] for r in rows["plain loop"])
    summary = {}
    for name, rs in rows.items():
        tps = statistics.mean(r["tokens_per_sec"] for r in rs)
        vl = [r["val_loss"] for r in rs]
        summary[name] = {"tokens_per_sec": tps, "ratio": tps / base, "val_loss": vl}
        table.add_row(name, f"{tps:,.0f}", f"{tps / base:.3f}", f"{statistics.mean(vl):.4f}",
                      ", ".join(f"{v:.4f}" for v in vl))
    console.print(table)
    if args.json:
        small = gen["small (10.7M, context 256)"]
        Path(args.json).write_text(json.dumps({
            "args": vars(args), "results": summary, "runs": rows, "generate": gen,
            "generate_cached_tokens_per_sec": small["cached_tokens_per_sec"],
            "generate_uncached_tokens_per_sec": small["uncached_tokens_per_sec"],
        }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
