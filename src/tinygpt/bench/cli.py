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
    python scripts/benchmark.py --generate-only                       # KV-cache decoding and its memory bound
    python scripts/benchmark.py --hf-only --out hf.json               # our GPT against transformers' GPT-2

Decoding is also measured against the bound that reading every fp32 weight once per token sets (weight bytes /
the memory's streaming-read rate, at one thread and at all cores), with each of its levers turned off in turn
and a profile of where a token's time goes. ``--hf`` puts our GPT beside transformers' GPT2LMHeadModel on the
same random weights (a training step and cached greedy decoding, at the default model's size and GPT-2 small's
shape), both programs at once, each on its own core with one thread.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from tinygpt.data.corpus import Shakespeare, TextFile
from tinygpt.data.datamodule import TextDataModule
from tinygpt.bench.micro import (BABY, SMALL, attention_costs, baby_flops_per_token, decode_at_memory_limit,
                                 generation_speed, interleaved_steps, matmul_peak_gflops, plain_loop)
from tinygpt.bench.programs import (
    ROOT,
    SWEEP_QUICK,
    debug_fast_wall,
    hf_side_by_side,
    import_floors,
    kept,
    levers,
    median_of,
    nanogpt_run,
    refusal_times,
    side_by_side,
    startup_pairs,
    sweep_comparison,
    tinygpt_run,
    warm_token_cache,
)
from tinygpt.runtime.console import fmt
from tinygpt.runtime.errors import OneLineParser

console = Console()


def parse_args(argv=None) -> argparse.Namespace:
    """The command line, every value checked before any work."""
    ap = OneLineParser("scripts/benchmark.py", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None,
                    help="a text file (default: the embedded corpus); docs/benchmarks.md's runs used Tiny "
                         "Shakespeare's input.txt, the file nanoGPT's data/shakespeare_char/prepare.py downloads")
    ap.add_argument("--nanogpt", type=Path, help="a nanoGPT checkout: its own train.py is the reference")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--cache-dir", default=str(ROOT / "data" / "cache"))
    ap.add_argument("--out", "--json", dest="out", help="write the results here as JSON")
    ap.add_argument("--quick", action="store_true", help="a few steps and short sequences (for tests)")
    ap.add_argument("--generate-only", action="store_true", help="only the KV-cache generation benchmark")
    ap.add_argument("--hf", action="store_true",
                    help="also our GPT beside transformers' GPT2LMHeadModel on the same weights (training step and "
                         "cached greedy decoding; needs transformers, 2 cores and taskset)")
    ap.add_argument("--hf-only", action="store_true", help="only that comparison")
    ap.add_argument("--hf-pairs", type=int, default=2, metavar="PAIRS",
                    help="runs of each comparison, both sides at once, cores swapped each time")
    ap.add_argument("--sweep", action="store_true",
                    help="also time a small sweep of experiment 1 one job after another and with its jobs at once")
    ap.add_argument("--sweep-only", action="store_true", help="only that sweep comparison")
    ap.add_argument("--sweep-steps", type=int, default=800, help="steps of each job of that sweep")
    ap.add_argument("--refusals-only", action="store_true",
                    help="only the time from a typo to its one-line error (train.py refusing bad values)")
    ap.add_argument("--levers", action="store_true", help="also one train.py run per lever (docs/benchmarks.md)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="runs of each program, alternating (ABBA); the JSON's top-level figures are medians")
    ap.add_argument("--lever-steps", type=int, default=500, help="steps of each lever run")
    ap.add_argument("--side-by-side", type=int, default=2, metavar="PAIRS",
                    help="with --nanogpt: run both programs at once, each on its own core with one thread, this "
                         "many times (cores swapped each time; 0: skip): ratios free of the machine's drift")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.sweep_steps < 1:
        ap.error(f"--steps={args.steps} and --sweep-steps={args.sweep_steps} must be >= 1.")
    if args.rounds < 1:
        ap.error(f"--rounds={args.rounds} must be >= 1.")
    if args.side_by_side < 0:
        ap.error(f"--side-by-side={args.side_by_side} must be >= 0.")
    if args.nanogpt and args.side_by_side and ((os.cpu_count() or 1) < 2 or not shutil.which("taskset")):
        ap.error("--side-by-side needs 2 cores and taskset (util-linux); pass --side-by-side 0 to skip it.")
    if (args.hf or args.hf_only) and ((os.cpu_count() or 1) < 2 or not shutil.which("taskset")):
        ap.error("--hf needs 2 cores and taskset (util-linux): both programs run at once, each on its own core.")
    if (args.hf or args.hf_only) and importlib.util.find_spec("transformers") is None:
        ap.error("--hf needs transformers: pip install 'transformers>=4.40' (the test extra).")
    if args.hf_pairs < 1:
        ap.error(f"--hf-pairs={args.hf_pairs} must be >= 1.")
    if args.nanogpt and not (args.nanogpt / "train.py").is_file():
        ap.error(f"--nanogpt={args.nanogpt} is not a nanoGPT checkout (no train.py there).")
    if args.nanogpt and not args.data:
        ap.error("--nanogpt needs --data (a text file nanoGPT can prepare as shakespeare_char).")
    return args


def generation(args) -> dict:
    """KV-cache decoding against recomputing, on the GPU recipe's model and the default one."""
    new_tokens = 8 if args.quick else 200
    gen = {name: generation_speed(arch, new_tokens) for name, arch in (("small (10.7M, context 256)", SMALL),
                                                                       ("baby (0.8M, context 64)", BABY))}
    # the same 200 new tokens after a 56-token prompt: the context fills to 256, as a chat or a sample does
    gen["small, prompt 56 (context filled)"] = generation_speed(SMALL, new_tokens, prompt_len=8 if args.quick else 56)
    show_generation(gen)
    threads = sorted({1, torch.get_num_threads()})
    decode = {name: {str(n): decode_at_memory_limit(arch, n, new_tokens=8 if args.quick else 255,
                                                    rounds=1 if args.quick else 3,
                                                    bandwidth_bytes=64 << 20 if args.quick else None,
                                                    repeats=2 if args.quick else 20)
                     for n in threads}
              for name, arch in (("small (10.7M, context 256)", SMALL), ("baby (0.8M, context 64)", BABY))}
    show_decode(decode)
    result: dict = {"generate": gen, "decode": decode,
                    "generate_cached_tokens_per_sec": gen["small (10.7M, context 256)"]["cached_tokens_per_sec"],
                    "generate_uncached_tokens_per_sec": gen["small (10.7M, context 256)"]["uncached_tokens_per_sec"]}
    return result


def whole_programs(args, steps: int, data_args: list[str], result: dict) -> tuple[dict, dict]:
    """train.py and the reference (nanoGPT's train.py, or the plain loop) in alternating rounds; their medians
    into ``result``; returns (reference, ours) medians."""
    if not args.nanogpt:
        corpus = TextFile(path=args.data) if args.data else Shakespeare()
        dm = TextDataModule(corpus, block_size=64, batch_size=12, cache_dir=args.cache_dir)
        dm.setup()
    warm_token_cache(data_args, args.cache_dir)  # untimed, as nanoGPT's prepare.py is
    result["import_floors"] = import_floors(1 if args.quick else 3)
    result["startup_pairs"] = startup_pairs(data_args, args.seed, args.cache_dir, 1 if args.quick else 3)
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
        "reference_startup_s": ref.get("startup_s"), "first_step_peak_rss_mib": ours.get("first_step_peak_rss_mib"),
        "steps": steps,
    })
    return ref, ours


def show_programs(args, steps: int, result: dict, ref: dict, ours: dict) -> None:
    reference = result["reference"]
    table = Table(title=f"train.py vs {reference}, {steps} steps, medians of {args.rounds} alternating rounds")
    for col in ("", "tokens/s (median step)", "wall s", "peak RSS MiB", "val loss"):
        table.add_column(col)
    table.add_row(reference.split(" (")[0], fmt(ref["tokens_per_sec"], ",.0f"), fmt(ref["wall_s"], ".1f"),
                  fmt(ref["peak_rss_mib"], ",.0f"), fmt(ref.get("val_loss"), ".4f"))
    table.add_row("tinygpt train.py", fmt(ours["tokens_per_sec"], ",.0f"), fmt(ours["wall_s"], ".1f"),
                  fmt(ours["peak_rss_mib"], ",.0f"), fmt(ours["val_loss"], ".4f"))
    console.print(table)
    console.print(f"tinygpt: first training step {ours['startup_s']:.1f} s after launch; tokens/s ratio "
                  f"{ours['tokens_per_sec'] / ref['tokens_per_sec']:.3f}; wall ratio "
                  f"{ours['wall_s'] / ref['wall_s']:.3f}")


def per_step(args, steps: int, data_args: list[str], result: dict) -> None:
    """The plain loop's bound on Lightning's own cost, the in-process step comparison and, with nanoGPT, both
    programs side by side."""
    if args.nanogpt:  # the plain loop bounds Lightning's own cost per step (same model, same windows source)
        dm = TextDataModule(TextFile(path=args.data), block_size=64, batch_size=12, cache_dir=args.cache_dir)
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


def efficiency(args, result: dict, ref: dict, ours: dict) -> None:
    """MFU against this machine's matmul peak, and the wall time of debug=fast."""
    peak = matmul_peak_gflops(512 if args.quick else 2048)
    fpt = baby_flops_per_token()
    result.update({"matmul_peak_gflops": peak, "flops_per_token": fpt,
                   "mfu": ours["tokens_per_sec"] * fpt / (peak * 1e9),
                   "reference_mfu": ref["tokens_per_sec"] * fpt / (peak * 1e9),
                   "debug_fast_wall_s": debug_fast_wall(args.cache_dir)})
    console.print(f"MFU: tinygpt {result['mfu']:.1%}, reference {result['reference_mfu']:.1%} of "
                  f"{peak:.0f} GFLOP/s (a {512 if args.quick else 2048}^3 fp32 matmul here); "
                  f"debug=fast {result['debug_fast_wall_s']:.1f} s")


def levers_and_attention(args, data_args: list[str], result: dict) -> None:
    """One train.py run per speed lever (with --levers) and the attention paths' cost."""
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


def sweep_small(args) -> dict:
    """The sweep comparison: experiment 1's recipe on 8 jobs, or 2 tiny ones with --quick."""
    if args.quick:
        return sweep_comparison(10, args.cache_dir, SWEEP_QUICK)
    return sweep_comparison(args.sweep_steps, args.cache_dir)


def main(argv=None) -> int:
    args = parse_args(argv)
    steps = 10 if args.quick else args.steps
    if args.sweep_only or args.hf_only or args.refusals_only:
        result = {"sweep": sweep_small(args)} if args.sweep_only else {}
        if args.refusals_only:
            result["refusals"] = refusal_times()
        if args.hf_only:
            result["hf"] = transformers_side_by_side(args)
        result.update(machine=machine(), command="python scripts/benchmark.py " + " ".join(
            argv if argv is not None else sys.argv[1:]))
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=2))
        return 0
    result = generation(args)
    if args.hf:
        result["hf"] = transformers_side_by_side(args)
    if not args.generate_only:
        data_args = ["corpus=text_file", f"corpus.path={args.data}"] if args.data else []
        console.print(f"data: {args.data or 'embedded shakespeare'}; {steps} steps; torch threads "
                      f"{torch.get_num_threads()}")
        ref, ours = whole_programs(args, steps, data_args, result)
        show_programs(args, steps, result, ref, ours)
        per_step(args, steps, data_args, result)
        efficiency(args, result, ref, ours)
        levers_and_attention(args, data_args, result)
        result["refusals"] = refusal_times(repeats=1 if args.quick else 3, floors=result.get("import_floors"))
        if args.sweep:
            result["sweep"] = sweep_small(args)
    from tinygpt.sampling.fast_linear import FastDecodeLinear
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


def transformers_side_by_side(args) -> dict:
    """Our GPT beside transformers' GPT-2 on the same weights, both at once on a core each (2 tiny pairs with
    --quick)."""
    sizes = ["tiny"] if args.quick else ["baby", "gpt2"]
    hf = hf_side_by_side(sizes, pairs=args.hf_pairs)
    table = Table(title="our GPT vs transformers' GPT2LMHeadModel, same weights, both at once, one core and one "
                        "thread each (medians over the pairs)")
    for col in ("size", "what", "tinygpt tokens/s", "transformers tokens/s", "ratio", "same greedy tokens"):
        table.add_column(col)
    for size, whats in hf.items():
        for what, r in whats.items():
            same = "" if what == "train" else str(all(p["identical_tokens"] for p in r["pairs"]))
            table.add_row(size, what, f"{r['tinygpt_tokens_per_sec']:,.1f}", f"{r['transformers_tokens_per_sec']:,.1f}",
                          f"{r['ratio']:.2f}", same)
    console.print(table)
    return hf


def show_decode(decode: dict) -> None:
    table = Table(title="cached greedy decoding at batch 1 against the memory bound (every fp32 weight read once "
                        "per token / streaming-read rate)")
    for col in ("model", "threads", "weights MB", "read GB/s", "bound tokens/s", "tokens/s", "of bound",
                "products alone ms", "ms/token", "before (tokens/s)"):
        table.add_column(col)
    for name, by_threads in decode.items():
        for n, d in by_threads.items():
            before = d["levers"]["none of them (the decode path before)"]["tokens_per_sec"]
            table.add_row(name, n, f"{d['weight_bytes'] / 1e6:.1f}", f"{d['bandwidth_gbps']:.1f}",
                          f"{d['bound_tokens_per_sec']:,.0f}", f"{d['cached_tokens_per_sec']:,.0f}",
                          f"{d['fraction_of_bound']:.0%}", f"{d['products_alone_ms']:.2f}", f"{d['ms_per_token']:.2f}",
                          f"{before:,.0f}")
    console.print(table)
