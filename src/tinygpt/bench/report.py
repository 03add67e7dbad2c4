"""docs/benchmarks.md and its plot from one JSON written by scripts/benchmark.py (no number typed by hand).

    python scripts/benchmark.py --nanogpt ../nanoGPT --data <Tiny Shakespeare's input.txt> \
        --levers --out docs/records/benchmark/<date>.json
    python scripts/benchmark_report.py docs/records/benchmark/*.json   # the last reported, all in a table of runs
                                                    # -> docs/benchmarks.md, docs/records/benchmark/*.png
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

from tinygpt.bench.programs import REFUSALS, SCRIPT_REFUSALS
from tinygpt.runtime.console import fmt

ROOT = Path(__file__).resolve().parents[3]  # the checkout that holds docs/

# What became of each lever (the measurements are in the table next to it).
VERDICT = {
    "default": "the recipe as shipped",
    "progress bar redrawn once a second": "within noise here; the default redraws 5 times a second (`refresh_rate`)",
    # the records before 2026-12-02 name the same lever wrongly: refresh_rate is redraws per second, not steps apart
    "progress bar redrawn every step": "misnamed when measured: `refresh_rate=1` is one redraw a second, against "
                                       "the default 5 (Rich redraws on a thread, `refresh_rate` times a second); "
                                       "within noise",
    "no heap trim": "kept the trim (`callbacks.heap_trim`): without it the resident size keeps growing",
    "no periodic attention maps": "kept the maps every 500 steps, drawn on a background thread by blitting "
                                  "(`tinygpt.pictures.plots`)",
    "validation twice as often": "dropped: validation every 500 steps (was 250) in the default recipe",
    "no loggers (W&B, CSV)": "kept W&B + CSV (what the project is for); `logger=none` is there for speed",
    "AdamW foreach instead of fused": "kept fused AdamW",
    "one thread": "kept torch's default (all cores)",
    "torch.compile (compile time counted)": "kept off on the CPU (`compile=true` for GPUs); its compile time "
                                            "depends on torch's on-disk cache (cold or warm from an earlier run)",
}


WHILE_BUILDING = "measured-while-building.json"  # single measurements the code's design rests on
IN_WORDS = "in-words-2026-11-30.md"  # the first comparisons with nanoGPT summarised by hand, kept as written then


def in_words(path: Path) -> list[str]:
    """The committed hand-written summary of the first runs against nanoGPT (its own section, as written)."""
    return ["", path.read_text().rstrip("\n"), ""] if path.is_file() else []


def while_building(path: Path) -> list[str]:
    """The section of single measurements taken while the code was written (a committed JSON, one row each)."""
    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    rows = [f"| `{row['code']}` | {row['what']} | {row['figure']} |" for row in data["rows"]]
    return ["## Measured while building", "", data["about"], "", "| code | what | measured |", "|---|---|---|",
            *rows, ""]


def portable(command: str) -> str:
    """A recorded command without the measuring machine's paths (the JSON keeps them): this checkout's parent dir
    written as `..`, and the corpus file (`--data`) by what it is."""
    words = command.replace(str(ROOT.parent) + "/", "../").split(" ")
    for i, word in enumerate(words[:-1]):
        if word == "--data" and words[i + 1].endswith("tinyshakespeare/input.txt"):
            words[i + 1] = "<Tiny Shakespeare's input.txt>"
    return " ".join(words)


def mark(ok: bool) -> str:
    return "met" if ok else "**not met**"


def plot_attention(att: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    lengths = sorted(int(t) for t in att)
    fig = Figure(figsize=(9, 3.6))
    ax_t, ax_m = fig.subplots(1, 2)
    for backend, style in (("math", "o-"), ("sdpa", "s-")):
        ax_t.plot(lengths, [att[str(t)][backend]["fwd_bwd_ms"] for t in lengths], style, label=backend)
        ax_m.plot(lengths, [max(att[str(t)][backend]["peak_mib_above_start"], 0.1) for t in lengths], style,
                  label=backend)
    for ax, label in ((ax_t, "forward + backward (ms)"), (ax_m, "peak memory above start (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("attention, batch 1, 4 heads of 32: the math path vs the fused kernel (sdpa)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def runs_table(runs: list[tuple[Path, dict]]) -> list[str]:
    """One row per benchmark JSON: the back-to-back ratios of each run, to show how much they move."""
    lines = ["| run (JSON) | tinygpt tokens/s | nanoGPT tokens/s | ratio | tinygpt wall | nanoGPT wall | ratio | "
             "tinygpt peak | nanoGPT peak | ratio |", "|---|---|---|---|---|---|---|---|---|---|"]
    for path, r in runs:
        mem = r["peak_rss_mib"] / r["reference_peak_rss_mib"] if r.get("reference_peak_rss_mib") else None
        lines.append(
            f"| `{path.name}` | {r['lightning_tokens_per_sec']:,.0f} | {r['reference_tokens_per_sec']:,.0f} | "
            f"{r['lightning_tokens_per_sec'] / r['reference_tokens_per_sec']:.2f} | {r['wall_s']:.1f} s | "
            f"{r['reference_wall_s']:.1f} s | {r['wall_s'] / r['reference_wall_s']:.2f} | "
            f"{r['peak_rss_mib']:,.0f} MiB | "
            f"{fmt(r.get('reference_peak_rss_mib'), ',.0f')} MiB | {fmt(mem, '.2f')} |")
    return lines


def span(values: list[float], spec: str) -> str:
    lo, hi = format(min(values), spec), format(max(values), spec)
    return lo if lo == hi else f"{lo}-{hi}"


def before_split(earlier: list[tuple[Path, dict]]) -> str:
    """The KV-cache figures of the earlier JSONs written before tinygpt.sampling.fast_linear's split product existed."""
    gens = [r["generate"] for _, r in earlier if "generate" in r and "decode_linear" not in r]
    if not gens:
        return ""
    small, filled = "small (10.7M, context 256)", "small, prompt 56 (context filled)"
    ms = [1000 / g[small]["cached_tokens_per_sec"] for g in gens]
    one = [g[small]["speedup"] for g in gens]
    full = [g[filled]["speedup"] for g in gens if filled in g]
    return (f"; in the earlier JSONs, before the split, {span(ms, '.1f')} ms, a speedup of {span(one, '.1f')}x "
            "from a 1-token prompt" + (f" and {span(full, '.1f')}x with the context filled" if full else ""))


def step_ab_row(r: dict) -> list[str]:
    """The drift-free per-step comparison as a row of the main table (with --nanogpt only)."""
    ab = r.get("step_ab") or {}
    ng = ab.get("nanoGPT's GPT and configure_optimizers")
    if not ng:
        return []
    ours = next(iter(ab.values()))
    return [f"| tokens/s per step, both models in one process taking turns (no drift) | {768 / ng * 1000:,.0f} | "
            f"{768 / ours * 1000:,.0f} | {ng / ours:.2f} | >= 1.0: {mark(ng / ours >= 1.0)} |"]


def step_ab_lines(ab: dict) -> list[str]:
    """The in-process step comparison: variants taking turns, so drift falls on all alike."""
    base = next(iter(ab.values()))
    lines = ["One training step (forward, backward, clipping, AdamW on a 12 x 64 batch) in one process, the "
             "variants taking turns every 10 steps so that the machine's drift falls on all of them alike:", "",
             "| variant | ms/step (median) | vs the default |", "|---|---|---|"]
    lines += [f"| {name} | {ms:.2f} | {ms / base:.3f} |" for name, ms in ab.items()]
    ng = ab.get("nanoGPT's GPT and configure_optimizers")
    more_work = [n for n in ("tinygpt GPT, foreach AdamW", "tinygpt GPT, torch's clip_grad_norm_") if n in ab]
    faster = [n for n in more_work if ab[n] < base]
    if faster:  # rows that do strictly more work than the default cannot really be faster: that is the noise
        lines += ["", "The " + " and ".join(f"`{n.split(', ', 1)[1]}` row ({ab[n] / base:.3f})" for n in faster)
                  + " came out faster than the default although " + ("they do" if len(faster) > 1 else "it does")
                  + " strictly more work: this in-process comparison itself moves by up to "
                  f"{1 - min(ab[n] for n in faster) / base:.0%} here, so ratios within that band are not "
                  "resolved by one run."]
    if ng:
        clip = "tinygpt GPT, torch's clip_grad_norm_" in ab
        lines += ["", f"Per step, without the drift, our model and optimizer run at {ng / base:.3f}x nanoGPT's "
                  "tokens/s: the same arithmetic (both GPTs do the same matmuls; "
                  + ("the differences are fused AdamW and the clipping that skips multiplying by 1.0"
                     + ("; their own rows are within this comparison's noise in this run)" if faster else
                        ", which the foreach and clip_grad_norm_ rows show)") if clip else
                     "fused AdamW is the difference the foreach row shows)")
                  + ". A 1.1x target on the same model math would need faster kernels "
                  "than torch's on this CPU; `torch.compile` did not give them (levers). Where the rounds' medians "
                  "and this row disagree, trust this row for the per-step ratio: the rounds time whole programs "
                  "minutes apart on a machine whose speed moves (see the spread between rounds above)."]
    return [*lines, ""]


def side_by_side_rows(r: dict) -> list[str]:
    """The drift-free whole-program ratios as rows of the main table (with --nanogpt --side-by-side)."""
    if not r.get("side_by_side"):
        return []
    n, tok, wall = len(r["side_by_side"]), r["side_by_side_tokens_per_sec_ratio"], r["side_by_side_wall_ratio"]
    return [f"| tokens/s (median step), both programs at once, one core and one thread each (no drift; median of "
            f"{n} pairs) | | | {tok:.2f} | >= 1.0: {mark(tok >= 1.0)} |",
            f"| wall time, both programs at once, one core and one thread each (no drift; median of {n} pairs) | "
            f"| | {wall:.3f} | <= 1.10: {mark(wall <= 1.10)} |"]


def side_by_side_lines(r: dict, ref_name: str) -> list[str]:
    """Each side-by-side pair: both programs launched together, each pinned to its own core, one thread."""
    pairs = r["side_by_side"]
    lines = ["### Side by side: both programs at once, each on its own core with one thread", "",
             "The back-to-back rounds above compare runs minutes apart on a machine whose speed moves. Here both "
             "programs start together, each pinned to one of the two cores (`taskset`) with one thread "
             "(`OMP_NUM_THREADS=1`), the cores swapped between pairs: whatever the machine does during a pair it "
             "does to both, so a pair's ratio holds. One thread each is not the default's two: this compares the "
             "programs' own work (steps, loops, evaluations, start-up, extras), not how each uses two cores.", "",
             f"| pair | tinygpt core | {ref_name} wall | tinygpt wall | ratio | {ref_name} tokens/s | "
             "tinygpt tokens/s | ratio | tinygpt peak | " + ref_name + " peak |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for i, p in enumerate(pairs, 1):
        ref, ours = p["reference"], p["tinygpt"]
        lines.append(f"| {i} | {p['tinygpt_core']} | {ref['wall_s']:.1f} s | {ours['wall_s']:.1f} s | "
                     f"{ours['wall_s'] / ref['wall_s']:.3f} | {ref['tokens_per_sec']:,.0f} | "
                     f"{ours['tokens_per_sec']:,.0f} | {ours['tokens_per_sec'] / ref['tokens_per_sec']:.2f} | "
                     f"{fmt(ours.get('peak_rss_mib'), ',.0f')} MiB | {fmt(ref.get('peak_rss_mib'), ',.0f')} MiB |")
    lines += ["", f"Medians over the pairs: wall ratio {r['side_by_side_wall_ratio']:.3f}, tokens/s ratio "
              f"{r['side_by_side_tokens_per_sec_ratio']:.2f}.", ""]
    return lines


def rounds_table(r: dict, ref_name: str) -> list[str]:
    """Each alternating round of the benchmark: both programs' wall time and tokens/s, and their ratios."""
    lines = [f"| round | {ref_name} wall | tinygpt wall | ratio | {ref_name} tokens/s | tinygpt tokens/s | ratio |",
             "|---|---|---|---|---|---|---|"]
    for i, rnd in enumerate(r["rounds"], 1):
        ref, ours = rnd["reference"], rnd["tinygpt"]
        lines.append(f"| {i} | {ref['wall_s']:.1f} s | {ours['wall_s']:.1f} s | {ours['wall_s'] / ref['wall_s']:.3f} | "
                     f"{ref['tokens_per_sec']:,.0f} | {ours['tokens_per_sec']:,.0f} | "
                     f"{ours['tokens_per_sec'] / ref['tokens_per_sec']:.2f} |")
    spread = {side: [rnd[side]["tokens_per_sec"] for rnd in r["rounds"]] for side in ("reference", "tinygpt")}
    lines += ["", f"The same program between rounds: {ref_name} {min(spread['reference']):,.0f} to "
              f"{max(spread['reference']):,.0f} tokens/s, tinygpt {min(spread['tinygpt']):,.0f} to "
              f"{max(spread['tinygpt']):,.0f}: that spread is this machine's, not the code's."]
    return [*lines, ""]


def report(r: dict, json_path: Path, out: Path, earlier: list[tuple[Path, dict]] = (),
           others: list[tuple[Path, dict]] = (), later: list[tuple[Path, dict]] = ()) -> str:
    """docs/benchmarks.md (and its attention plot) from the run ``r`` read from ``json_path``; ``earlier`` full
    runs fill the table of runs and stand in for sections this run lacks, and ``others`` (any earlier JSON, a
    ``--sweep-only`` one included) for the sweep section."""
    lines = [*training_lines(r, json_path, earlier), *machine_rows([*others, (json_path, r)]),
             *refusal_lines(r, others, later), *sweep_lines(r, others),
             *generation_lines(r, earlier, others),
             *decode_lines(r, others), *hf_lines(r, others), *attention_lines(r), *lever_lines(r, earlier),
             *gpu_lines()]
    lines += while_building(out.parent / "records" / "benchmark" / WHILE_BUILDING)
    lines += in_words(out.parent / "records" / "benchmark" / IN_WORDS)
    out.write_text("\n".join(lines))
    plot_attention(r["attention"], out.parent / "records" / "benchmark" / "attention.png")
    return "\n".join(lines)


def training_lines(r: dict, json_path: Path, earlier) -> list[str]:
    """The targets table, how the programs were run, the rounds, side by side, the step comparison, the runs."""
    ref_name = r["reference"].split(" (")[0]
    tok_ratio = r["lightning_tokens_per_sec"] / r["reference_tokens_per_sec"]
    wall_ratio = r["wall_s"] / r["reference_wall_s"]
    mem_ratio = (r["peak_rss_mib"] / r["reference_peak_rss_mib"]) if r.get("reference_peak_rss_mib") else None
    rel = json_path.resolve().relative_to(ROOT) if json_path.resolve().is_relative_to(ROOT) else json_path
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `python scripts/benchmark_report.py` from `{rel}`, the JSON that `{portable(r['command'])}` "
        "wrote; "
        "every number below comes from that file. Machine: " + r["machine"] + ".",
        "",
        f"## `python train.py` against {ref_name}, back to back",
        "",
        *([f"Each program ran {len(r['rounds'])} times, alternating (ABBA: reference first in odd rounds, ours "
           "first in even ones) so that the machine's drift during the benchmark falls on both; the table gives "
           "the medians, the rounds follow it.", ""] if r.get("rounds") else []),
        f"The default recipe (nanoGPT's CPU recipe: 4 layers, 4 heads, 128 wide, context 64, batch 12, {r['steps']} "
        "steps) on Tiny Shakespeare, each program as a user runs it: ours with its validations, attention maps, "
        "text samples, end-of-run diagnostics and W&B (offline); nanoGPT's `train.py` with its README's CPU "
        "command (`--eval_iters=20`). Tokens/s is the median training step; wall time is launch to exit; peak "
        "memory is `/usr/bin/time`'s maximum resident size.",
        "",
        "| | " + ref_name + " | tinygpt | ratio | target |",
        "|---|---|---|---|---|",
        f"| tokens/s (median step) | {r['reference_tokens_per_sec']:,.0f} | {r['lightning_tokens_per_sec']:,.0f} | "
        f"{tok_ratio:.2f} | >= 1.0: {mark(tok_ratio >= 1.0)} |",
        *step_ab_row(r),
        *side_by_side_rows(r),
        f"| wall time | {r['reference_wall_s']:.1f} s | {r['wall_s']:.1f} s | {wall_ratio:.3f} | "
        f"<= 1.10: {mark(wall_ratio <= 1.10)} |",
        startup_row(r),
        f"| `python train.py debug=fast` (10 steps) | | {r['debug_fast_wall_s']:.1f} s | | "
        f"< 20 s: {mark(r['debug_fast_wall_s'] < 20)} |",
        f"| peak memory | {fmt(r.get('reference_peak_rss_mib'), ',.0f')} MiB | {r['peak_rss_mib']:,.0f} MiB | "
        f"{fmt(mem_ratio, '.2f')} | <= 2: {mark(mem_ratio is not None and mem_ratio <= 2)} |",
        f"| MFU | {r['reference_mfu']:.1%} | {r['mfu']:.1%} | | |",
        *([f"| plain loop around our GPT (tokens/s, 300 steps) | | {r['plain_loop_tokens_per_sec']:,.0f} | "
           f"{r['lightning_tokens_per_sec'] / r['plain_loop_tokens_per_sec']:.2f} | bounds Lightning's cost per step "
           "(one run after the others: the machine's drift included) |"]
          if r.get("plain_loop_tokens_per_sec") else []),
        f"| val loss | {fmt(r.get('reference_val_loss'), '.4f')} | {r['val_loss']:.4f} | | |",
        "",
        *(rounds_table(r, ref_name) if r.get("rounds") else []),
        *(side_by_side_lines(r, ref_name) if r.get("side_by_side") else []),
        *(step_ab_lines(r["step_ab"]) if r.get("step_ab") else []),
        *memory_lines(r),
        "Where the wall time goes: "
        f"{r['steps']} steps at the median step time take {r['steps'] * 768 / r['lightning_tokens_per_sec']:.1f} s "
        f"of our {r['wall_s']:.1f} s, leaving {r['wall_s'] - r['steps'] * 768 / r['lightning_tokens_per_sec']:.1f} s "
        "for start-up, validations, samples, attention maps, the stability and autoregressive probes, the end-of-run "
        "diagnostics and W&B; nanoGPT leaves "
        f"{r['reference_wall_s'] - r['steps'] * 768 / r['reference_tokens_per_sec']:.1f} s (start-up and its "
        "evaluations). Back-to-back runs of the same program vary here by several ms per step (compare the levers "
        "below whose arithmetic is identical), and so does nanoGPT between sessions: earlier JSONs in "
        "`docs/records/benchmark/` hold other draws.",
        "",
        f"MFU = tokens/s x {r['flops_per_token'] / 1e6:.2f} MFLOP per token (6N + 12 L C T, forward and backward, "
        f"`GPT.flops_per_token`) / {r['matmul_peak_gflops']:.0f} GFLOP/s, the rate of a large fp32 matmul measured "
        "in the same run. The two val losses are different estimates: nanoGPT's is the mean of 20 random batches, "
        "ours 1,024 fixed windows; both programs train on the same text with the same recipe.",
        "",
        *(["Every back-to-back run kept in `docs/records/benchmark/` (the last one is the run above; earlier ones may "
           "predate some of the changes; see each JSON's `command` and the git history):", "",
           *runs_table([*earlier, (json_path, r)]), "",
           "The same program's speed moves between runs on this shared machine (nanoGPT's own tokens/s too), so "
           "a single ratio is one draw, not a property of the code.", ""] if earlier else []),
    ]
    return lines


def refusal_lines(r: dict, others, later=()) -> list[str]:
    """From a typo to its one-line error: train.py and the scripts refusing bad values, beside the imports that bound
    them (with each one's CPU time where the run measured it)."""
    found = next(((path, run) for path, run in reversed(list(later)) if run.get("refusals")), None) or \
        latest_with("refusals", r, others)  # a refusals-only run given after the reported one is the newer timing
    if found is None:
        return []
    path, run = found
    ref = run["refusals"]
    floors, cpu = ref["floors"], ref.get("cpu_s") or {}
    walls = {**{f"python train.py {o}": w for o, w in ref["train_py"].items()},
             **{shown_script(o): w for o, w in (ref.get("scripts") or {}).items()}}
    cpus = {**{f"python train.py {o}": cpu.get(o) for o in ref["train_py"]},
            **{shown_script(o): cpu.get(o) for o in ref.get("scripts") or {}}, **{f: cpu.get(f) for f in floors}}
    hydra = floors["python -c 'import hydra'"]
    with_cpu = any(c is not None for c in cpus.values())
    rows = [f"| `{name}` | {w:.2f} s |" + (f" {cpus[name]:.2f} s |" if cpus[name] is not None else " |") * with_cpu
            + f" {w - hydra:+.2f} s |" for name, w in {**walls, **floors}.items()]
    worst = max(walls.values()) - hydra
    unmeasured = [f"python train.py {o}" for o in REFUSALS if o not in ref["train_py"]] + [
        shown_script(o) for o in SCRIPT_REFUSALS if o not in (ref.get("scripts") or {})]
    return [
        "## From a typo to its one-line error",
        "",
        f"Launch to exit, the median of {ref['repeats']} runs each, in a scratch dir: `python train.py` and the "
        "scripts refusing a bad value (exit 2, one line), beside the imports that bound it"
        + (" (CPU: user + sys, the median; a loaded machine inflates it less than the wall)" if with_cpu else "")
        + ". Every value is checked before torch, Lightning or W&B is imported (`tinygpt.train.values`; the scripts "
        "read a checkpoint's layout and settings from its pickle without torch), so a refusal costs Hydra's start and "
        f"the config's composition: the slowest here is {worst:.2f} s after `import hydra` (goal: within about a "
        "second of it); a refusal after the heavy imports would cost at least `import lightning`."
        + source_note(path, run),
        "",
        "| command | wall |" + " CPU |" * with_cpu + " after `import hydra` |",
        "|---|---|" + "---|" * with_cpu + "---|",
        *rows,
        "",
        *([f"Refused before torch too, not timed in this run (the benchmark times them from its next run on): "
           f"{', '.join(f'`{o}`' for o in unmeasured)}.", ""] if unmeasured else []),
        "The files these commands name are made in the scratch dir (`tinygpt.bench.programs.refusal_files`): "
        "`five.txt` a 5-byte corpus, `notes.zip` a zip that is not a checkpoint, `killed` a run dir killed before its "
        "first checkpoint, `ids.ckpt` a token-id model, `text.ckpt` a character model, `leaky.ckpt` one trained with "
        "`model.attn.causal=false`, `patched.ckpt` one with experiment 3's `off_by_one` patch; `HF_HUB_OFFLINE=1` "
        "runs with an empty Hub cache.",
        "",
        "Refusals that wait for torch, and why: each answer is something only torch (or Lightning) can read. Every "
        "other refusal of train.py and the scripts (a checkpoint's layout, settings and step, a prompt's tokens, a "
        "run's config.yaml, a Hub name the Hub cannot serve) comes before torch is imported.",
        "",
        "| refusal | why it needs torch |",
        "|---|---|",
        *[f"| {what} | {why} |" for what, why in AFTER_TORCH],
        "",
    ]


def shown_script(refusal: str) -> str:
    """A SCRIPT_REFUSALS entry as a user types it: 'HF_HUB_OFFLINE=1 python scripts/sample.py --init_from gpt2'."""
    words = refusal.split(" ")
    n_env = next(i for i, w in enumerate(words) if "=" not in w)  # leading NAME=value words: the environment
    return " ".join([*words[:n_env], "python", *words[n_env:]])


# the refusals that must wait for torch (docs/benchmarks.md, "From a typo to its one-line error"): (what, why)
AFTER_TORCH = [
    ("`trainer=gpu` (or `sample.py --device cuda`) where a GPU driver is installed but no GPU can be used",
     "whether a device can be used is torch's answer (`torch.cuda.is_available()`, the MPS backend); a machine with "
     "no GPU driver at all is refused before torch"),
    ("a model too large for the GPU's memory (`check_memory`)",
     "the GPU's memory is read through `torch.cuda`; on the CPU the estimate's floor is checked before torch"),
    ("`ckpt_path=` (or `--ckpt`) a checkpoint whose weights do not fit the model, or whose archive is cut short "
     "inside its tensors",
     "the tensors' shapes and bytes are read by `torch.load`; the archive's layout, settings and step are read "
     "before it"),
]


def sweep_lines(r: dict, earlier) -> list[str]:
    """A small sweep one job after another against its jobs at once (this run's, else the latest earlier run
    that timed one: ``scripts/benchmark.py --sweep`` or ``--sweep-only``)."""
    sweep = r.get("sweep") or next((e["sweep"] for _, e in reversed(earlier) if e.get("sweep")), None)
    if sweep is None:
        return []
    rows = [f"| {name} | {run['jobs']} | {run['threads_per_job']} | {run['wall_s']:.1f} | {run['jobs_per_hour']:.0f} "
            f"| {run['tokens_per_sec']:,.0f} |" for name, run in sweep["runs"].items()]
    return [
        "## Sweeps: jobs one by one against jobs at once",
        "",
        f"`{sweep['command']}`, W&B offline, as a user runs it: the basic launcher (one job after another, all "
        "cores each) against `hydra/launcher=parallel`, the experiments' default (as many jobs at once as cores, "
        "one thread each). Tokens/s are summed over the jobs: all tokens trained over the sweep's wall time.",
        "",
        "| jobs | count | threads each | wall s | jobs per hour | tokens/s (all jobs) |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"At once: {sweep['speedup']:.2f}x the throughput. The final losses of each job differ between the two ways "
        f"by at most {sweep['max_loss_difference']:.2g} (one thread sums in another order than two).",
        "",
    ]


def machine_type(run: dict) -> str:
    """The CPU model and its widest vector extension, from a JSON's machine line ("2 cores (AMD EPYC, AVX-512),
    ...": "AMD EPYC, AVX-512"); the machine types the project lands on differ here, not in cores or memory."""
    found = re.search(r"\(([^()]*(?:\([^()]*\)[^()]*)*)\)", run.get("machine") or "")
    return found.group(1) if found else "unknown machine"


def startup_over_floor(r: dict) -> tuple[float, float, str] | None:
    """(start-up s, its cost over `import lightning` s, how measured): the medians of the run's start-up pairs
    (each floor taken right before its start-up) where it took them, else its one timed round's start-up against
    its import floors; None without a floor."""
    pairs = r.get("startup_pairs")
    if pairs:
        overs = [p["startup_s"] - p["import_lightning_s"] for p in pairs]
        return (statistics.median(p["startup_s"] for p in pairs), statistics.median(overs),
                (f"the median of {len(pairs)} pairs taken in turn: " + ", ".join(f"{o:+.1f}" for o in overs))
                if len(pairs) > 1 else "one pair, the floor timed right before")
    floor = lightning_floor(r)
    if floor is None or r.get("startup_s") is None:
        return None
    return r["startup_s"], r["startup_s"] - floor, "one start-up, the floor timed apart"


def startup_row(r: dict) -> str:
    """Launch to the first training step, ours beside nanoGPT's, against `import lightning` when measured."""
    ref = "" if r.get("reference_startup_s") is None else f"{r['reference_startup_s']:.1f} s"
    measured = startup_over_floor(r)
    if measured is None:
        return (f"| time to the first training step | {ref} | {r['startup_s']:.1f} s | | "
                f"< 10 s: {mark(r['startup_s'] < 10)} |")
    start, over, how = measured
    return (f"| time to the first training step | {ref} | {start:.1f} s | | within 1.5 s of `import lightning`: "
            f"{over:+.1f} s ({how}): {mark(over <= 1.5)} |")


def lightning_floor(run: dict) -> float | None:
    """The launch-to-exit time of ``python -c 'import lightning'`` measured in the run (its import floors, else its
    refusals' floors), or None."""
    floors = run.get("import_floors") or {}
    if floors.get("import lightning"):
        return floors["import lightning"]["wall_s"]
    return ((run.get("refusals") or {}).get("floors") or {}).get("python -c 'import lightning'")


def memory_lines(r: dict) -> list[str]:
    """Where the peak memory goes: the imports every program pays (torch; Lightning over it), what our run held at
    its first step, and its peak, beside nanoGPT's peak, from the run's own measures (when it took them)."""
    floors, first = r.get("import_floors"), r.get("first_step_peak_rss_mib")
    if not floors or first is None:
        return []
    torch_mib, lightning_mib = floors["import torch"]["peak_rss_mib"], floors["import lightning"]["peak_rss_mib"]
    ref = r.get("reference_peak_rss_mib")
    return [
        f"Where the memory goes (peak resident sizes): `import torch` alone holds {torch_mib:,.0f} MiB, and "
        f"`import lightning` {lightning_mib:,.0f} MiB ({lightning_mib - torch_mib:+,.0f} MiB: Lightning imports "
        "torchmetrics, which imports transformers where it is installed (the test extra), scipy.signal and "
        "matplotlib); our run held "
        f"{first:,.0f} MiB when its first step began (those imports, W&B, Hydra, the data and the model) and "
        f"peaked at {r['peak_rss_mib']:,.0f} MiB ({r['peak_rss_mib'] - first:+,.0f} MiB over its first step: "
        "training, validations, samples, maps, the end-of-run scoring)"
        + ("" if ref is None else f"; nanoGPT's whole run peaked at {ref:,.0f} MiB") + ". Found and removed while "
        "measuring on the AMD EPYC (2026-12-04 and -05; the commits say by how much): the bigram baseline's "
        "torch.unique at the end of the run (now two binary searches in the training pairs sorted in place), W&B "
        "importing pandas and pyarrow to check each image for a DataFrame, glibc's per-thread heaps, which the trims "
        "did not return (now one heap for every thread), and each step's loss kept as a tensor of its own: it pinned "
        "a scrap of heap among the step's freed activations, so glibc took every next step's from fresh memory and "
        "the heap grew at every step between trims (now the losses go into blocks made once per 1,024 steps, "
        "train/step_losses.py). What is left above the first step: the validations' larger batches and the end of "
        "the run, while the blocks in use stay flat through training.",
        "",
    ]


def machine_rows(runs: list[tuple[Path | None, dict]]) -> list[str]:
    """One row per machine type: the decided targets from its newest JSON that measured them (side by side, start-up,
    decoding), so that a regression on either type shows."""
    rows = []
    for kind in dict.fromkeys(machine_type(run) for _, run in runs):
        mine = [(path, run) for path, run in runs if machine_type(run) == kind]
        sbs = [(path, run) for path, run in mine if run.get("side_by_side")]
        dec = [(path, run) for path, run in mine if run.get("decode")]
        if not sbs and not dec:
            continue
        cells = [kind]
        if sbs:
            path, run = sbs[-1]
            pairs = run["side_by_side"]
            walls = [p["tinygpt"]["wall_s"] / p["reference"]["wall_s"] for p in pairs]
            toks = [p["tinygpt"]["tokens_per_sec"] / p["reference"]["tokens_per_sec"] for p in pairs]
            mems = [p["tinygpt"]["peak_rss_mib"] / p["reference"]["peak_rss_mib"] for p in pairs
                    if p["reference"].get("peak_rss_mib")]
            measured = startup_over_floor(run)
            cells += [f"`{(path or Path('this run')).name}`",
                      f"{statistics.median(toks):.3f} ({', '.join(f'{t:.3f}' for t in toks)}): "
                      f"{mark(min(toks) >= 1.0)}",
                      f"{statistics.median(walls):.3f} ({', '.join(f'{w:.3f}' for w in walls)}): "
                      f"{mark(max(walls) <= 1.10)}",
                      f"{statistics.median(mems):.2f} ({', '.join(f'{m:.2f}' for m in mems)}): {mark(max(mems) <= 2.0)}"
                      if mems else "-",
                      ("-" if run.get("startup_s") is None else f"{run['startup_s']:.1f} s") if measured is None
                      else f"{measured[0]:.1f} s ({measured[1]:+.1f} s over `import lightning`, {measured[2]}: "
                           f"{mark(measured[1] <= 1.5)})" + (
                          "" if run.get("reference_startup_s") is None else
                          f"; nanoGPT {run['reference_startup_s']:.1f} s in its timed round")]
        else:
            cells += ["-"] * 5
        cells.append(decode_cell(dec) if dec else "-")
        rows.append("| " + " | ".join(cells) + " |")
    if not rows:
        return []
    return ["## The decided targets on each machine type", "",
            "The CPU model is not ours to choose: each row is the newest JSON in `docs/records/benchmark/` measured on "
            "that type (side by side: both programs at once, one core and one thread each, the cores swapped; the "
            "wall ratio's target holds per pair, so the worst pair is marked; decoding: judged against the fastest "
            "memory read recorded on the type, as in \"Decoding at the memory limit\").", "",
            "| machine type | side-by-side JSON | tokens/s vs nanoGPT, median (pairs) | wall vs nanoGPT, median "
            "(pairs) | peak memory vs nanoGPT, median (pairs) | start to first step (median), its cost over `import "
            "lightning` (target: 1.5 s at most) | cached decoding of `small`, 2 threads, of the weight-read bound |",
            "|---|---|---|---|---|---|---|", *rows, ""]


def small_at_two(decode: dict) -> dict | None:
    """The small model's decode at two threads in a run's ``decode`` results, or None."""
    return next((by["2"] for name, by in decode.items() if name.startswith("small") and "2" in by), None)


def fastest_read(runs: list[tuple[Path | None, dict]], threads: str = "2") -> tuple[float, Path | None] | None:
    """The fastest memory read any of ``runs`` saw at ``threads`` threads (around any model's decode: the same
    buffer, the same read), and its JSON."""
    seen = [(max(d.get("reads_gbps") or [d["bandwidth_gbps"]]), p) for p, r in runs
            for by in (r.get("decode") or {}).values() if (d := by.get(threads))]
    return max(seen, key=lambda x: x[0]) if seen else None


def judged(d: dict, fastest: tuple[float, Path | None] | None) -> tuple[float, float]:
    """(the read a decode is judged against, its fraction of that bound): the faster of its run's own read and
    the fastest recorded on its machine type at its thread count. On a virtual machine the read moves within
    minutes, and the decode's token rate need not move with it; a low bound does not make a target met."""
    read = max(d["bandwidth_gbps"], fastest[0] if fastest else 0.0)
    return read, d["cached_tokens_per_sec"] * d["weight_bytes"] / (read * 1e9)


def decode_cell(dec: list[tuple[Path | None, dict]]) -> str:
    """The decoding target on one machine type: the small model at two threads in its newest JSON, judged
    against the faster of that run's read and the fastest recorded on the type at two threads (``judged``)."""
    path, run = dec[-1]
    small = small_at_two(run["decode"])
    if small is None:
        return "-"
    fastest = fastest_read(dec)
    read, fraction = judged(small, fastest)
    name = (path or Path("this run")).name
    if read <= small["bandwidth_gbps"]:
        return f"{fraction:.0%} (`{name}`): {mark(fraction >= 0.6)}"
    return (f"{fraction:.0%} (`{name}`) against the fastest read recorded on this type ({read:.1f} GB/s, "
            f"`{(fastest[1] or Path('this run')).name}`; {small['fraction_of_bound']:.0%} against this run's "
            f"{small['bandwidth_gbps']:.1f}): {mark(fraction >= 0.6)}")


def latest_with(key: str, r: dict, others) -> tuple[Path | None, dict] | None:
    """The last JSON (``others`` in command-line order, then the reported run ``r``) that measured ``key``."""
    found = [(path, run) for path, run in others if run.get(key)]
    if r.get(key):
        found.append((None, r))
    return found[-1] if found else None


def source_note(path: Path | None, run: dict) -> str:
    """Where a section's numbers come from, when not from the reported run."""
    if path is None:
        return ""
    return f" From `{path.name}` (`{portable(run['command'])}`; machine: {run['machine']})."


def generation_lines(r: dict, earlier, others=()) -> list[str]:
    """KV-cache decoding against recomputing (from the latest JSON that also measured the memory bound, else the
    reported run)."""
    path, src = latest_with("decode", r, others) or (None, r)
    lines = [
        "## Generation with the KV cache",
        "",
        "Greedy decoding at batch 1, the cache against recomputing the whole context for every new token; "
        "the outputs must be identical." + source_note(path, src),
        "",
        "| model | prompt tokens | new tokens | cached tokens/s | recomputed tokens/s | speedup | identical |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, g in src["generate"].items():
        lines.append(f"| {name} | {g.get('prompt_tokens', 1)} | {g['new_tokens']} | {g['cached_tokens_per_sec']:,.0f} "
                     f"| {g['uncached_tokens_per_sec']:,.0f} | {g['speedup']:.1f}x | {g['identical']} |")
    small = src["generate"]["small (10.7M, context 256)"]
    filled = src["generate"].get("small, prompt 56 (context filled)")
    lines += [
        "",
        f"Target: at least 5x on the 10.7M model for 200 new tokens: from a 1-token prompt {small['speedup']:.1f}x "
        f"({mark(small['speedup'] >= 5)}); with the context filled (56-token prompt, as when sampling after a "
        f"prompt) {filled['speedup']:.1f}x ({mark(filled['speedup'] >= 5)})." if filled else "",
    ]
    if src.get("decode"):
        lines += [
            f"A cached token on the 10.7M model takes {1000 / small['cached_tokens_per_sec']:.1f} ms in this run "
            "(torch's default threads). The longer the context, the more recomputing costs and the more the cache "
            "saves. Beyond the context the learned position embeddings cannot slide, so the decode loop recomputes "
            "the last block_size tokens (`src/tinygpt/sampling/generate.py`); a leaky model (no mask) never caches. "
            "How close a cached token comes to the memory's limit, and what brought it there: the next section.",
            "",
        ]
        return lines
    lines += [
        "A cached step reads every weight once for one token (10.7M fp32 weights, 43 MB), so it is bound by "
        "memory bandwidth, and torch's `F.linear` on one row (MKL here) reads a weight on one core, far below "
        "what the memory gives two; `tinygpt.sampling.fast_linear.FastDecodeLinear` computes such products (at most "
        "8 rows, a big weight, no gradients, CPU) as one `torch.bmm` over the weight's two row halves, on both "
        "cores; sampling and this benchmark swap it in (`use_fast_decode`). A cached token on the 10.7M model takes "
        f"{1000 / small['cached_tokens_per_sec']:.1f} ms in this run" + before_split(earlier) + ". The longer "
        "the context, the more "
        "recomputing costs and the more the cache saves. Beyond the context the learned position embeddings "
        "cannot slide, so the decode "
        "loop recomputes the last block_size tokens (`src/tinygpt/sampling/generate.py`); a leaky model (no mask) "
        "never caches.",
        "",
    ]
    return lines


BEFORE = "none of them (the decode path before)"
SHIPPED = "all levers (as shipped)"
SPLIT_ALWAYS = "split products always, at any thread count (as before)"


def decode_lines(r: dict, others) -> list[str]:
    """Cached decoding against the bound that reading every weight once per token sets: the table, the levers
    one at a time, the profile."""
    found = latest_with("decode", r, others)
    if found is None:
        return []
    path, src = found
    dec = src["decode"]
    cols = [(name, n) for name, by_threads in dec.items() for n in by_threads]
    first = dec[cols[0][0]][cols[0][1]]
    same_type = [(p, run) for p, run in [*others, (path, src)] if machine_type(run) == machine_type(src)]
    rows = []
    for name, n in cols:
        d = dec[name][n]
        read, fraction = judged(d, fastest_read(same_type, n))
        before = d["levers"][BEFORE]
        reads = d.get("reads_gbps") or [d["bandwidth_gbps"]]
        around = ", ".join(f"{x['fraction_of_bound']:.0%}" for x in d.get("rounds_around", [])) or "-"
        rows.append(f"| {name} | {n} | {d['weight_bytes'] / 1e6:.1f} | {d['bandwidth_gbps']:.1f} | "
                    f"{min(reads):.1f}-{max(reads):.1f} | "
                    f"{d['bound_tokens_per_sec']:,.0f} | {d['cached_tokens_per_sec']:,.0f} | "
                    f"{d['fraction_of_bound']:.0%} | {around} | {fraction:.0%} ({read:.1f}) | "
                    f">= 60%: {mark(fraction >= 0.6)} | "
                    f"{before['tokens_per_sec']:,.0f} ({before['fraction_of_bound']:.0%}) | "
                    f"{d['cached_tokens_per_sec'] / before['tokens_per_sec']:.2f}x | "
                    f"{fmt(d.get('other_processes_cores'), '.2f')} |")
    lines = [
        "## Decoding at the memory limit",
        "",
        "A cached token multiplies every weight by one row: 2 FLOPs per weight read, so a token cannot come faster "
        "than the memory reads the weights. The bound: the weights' bytes (every parameter once, in fp32; the tied "
        "embedding once, as the token reads it as the head; the position table whole, though a token reads one row "
        "of it) / the memory's streaming-read rate: sums of a "
        f"{first['bandwidth_bytes'] / 2**30:.1f} GiB fp32 tensor ({llc(first)}) at the decode's thread count, "
        + ("read once before the timings and again right before and after each timed decode of the shipped path, "
           "the fastest read of them all setting the run's bound (the highest of its bounds, the lowest fraction): "
           "on a virtual machine the rate can move from one second to the next. "
           if first.get("reads_gbps") else "the best of 5 sums. ")
        + "Cached greedy decoding at batch 1 from a 1-token prompt to the end of the context, the best of "
        f"{first['rounds']} rounds in which the variants below take turns; `before` is the decode path with all of "
        "them off (the modules' forward per token, softmax + multinomial, no_grad without inference_mode, oneDNN's "
        "kernels, the split products at any thread count), in the same process; its greedy tokens equal the "
        "shipped path's. `each round` is each timed decode against the faster of the reads right before and after "
        "it. The target is judged against the fastest read recorded on this machine type at the row's thread count "
        "(in any JSON of `docs/records/benchmark/`, around either model: the same buffer, the same read), or this "
        "run's where it is faster: the decode's token rate need not move with the read, and a slow read's low bound "
        "does not make a target met." + source_note(path, src),
        "",
        "| model | threads | weights MB | read GB/s (fastest) | reads seen GB/s | bound tokens/s | cached tokens/s | "
        "of the bound | each round | against the fastest read on this type (GB/s) | target | before: tokens/s (of the "
        "bound) | speedup | other processes (cores) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "The last column is the CPU that other processes used during each row's measurements, on average: on this "
        "shared 2-core machine a busy core slows every timing, and with 2 threads each parallel region waits for "
        "the slower core.",
        "",
    ]
    resident = [(name, n, dec[name][n]) for name, n in cols if dec[name][n].get("llc_bytes")
                and dec[name][n]["weight_bytes"] < dec[name][n]["llc_bytes"]
                and dec[name][n]["resident_read_gbps"] > 1.5 * dec[name][n]["bandwidth_gbps"]]
    if resident:
        name, n, d = resident[0]
        lines += [f"A read of a buffer as large as the {name.split(' (')[0]} model's weights "
                  f"({d['weight_bytes'] / 1e6:.1f} MB, inside the {d['llc_bytes'] / 2**20:,.0f} MiB last-level cache) "
                  f"runs at {d['resident_read_gbps']:.1f} GB/s ({n} thread{'s' if n != '1' else ''}; "
                  f"{d['bandwidth_gbps']:.1f} from memory): its weights stay in the cache between tokens, so the "
                  "memory's bound is not its limit.", ""]
    levers = max((list(dec[name][n]["levers"]) for name, n in cols), key=len)  # a 1-thread run lacks one
    lines += [
        "Each lever turned off in turn (tokens/s, and against the shipped path; every variant's greedy tokens equal "
        "the shipped path's, checked in the run):",
        "",
        "| variant | " + " | ".join(f"{name.split(' (')[0]}, {n} thr." for name, n in cols) + " | identical |",
        "|---|" + "---|" * len(cols) + "---|",
    ]
    for lever in levers:
        cells = []
        for name, n in cols:
            d = dec[name][n]
            v = d["levers"].get(lever)
            cells.append("-" if v is None else f"{v['tokens_per_sec']:,.0f}" + (
                "" if lever == SHIPPED else f" ({v['tokens_per_sec'] / d['cached_tokens_per_sec']:.2f})"))
        same = all(dec[name][n]["levers"][lever]["identical"] for name, n in cols if lever in dec[name][n]["levers"])
        lines.append(f"| {lever} | " + " | ".join(cells) + f" | {same} |")
    lines += ["", *profile_lines(dec, cols), *decode_findings(dec), "",
              *what_stops_two_threads(dec, fastest_read(same_type)), "",
              *DECODE_LEVER_NOTES, ""]
    return lines


def decode_findings(dec: dict) -> list[str]:
    """What the profile says, in numbers from the run: the products' share of a token, the rest per layer on
    each model, what the levers bought."""
    one = {name: by_threads["1"] for name, by_threads in dec.items() if "1" in by_threads and
           by_threads["1"].get("arch")}
    if len(one) < 2:
        return []
    (big_name, big), (small_name, small) = sorted(one.items(), key=lambda kv: -kv[1]["weight_bytes"])[:2]

    def rest_per_layer(d):
        return (d["ms_per_token"] - d["products_alone_ms"]) / d["arch"]["n_layer"]

    def share(d):
        return d["products_alone_ms"] / d["ms_per_token"]

    short = {big_name: big_name.split(" (")[0], small_name: small_name.split(" (")[0]}
    return [
        f"Reading it (one thread): on the {short[big_name]} model a token's products alone are {share(big):.0%} of its "
        f"time ({big['products_alone_ms']:.2f} of {big['ms_per_token']:.2f} ms), and the rest (LayerNorm, GELU, "
        "attention, the cache writes and views, the Python between them) costs "
        f"{rest_per_layer(big):.3f} ms a layer, {rest_per_layer(big) / rest_per_layer(small):.1f}x what the same ops "
        f"cost a layer of the {short[small_name]} model ({rest_per_layer(small):.3f} ms), whose rows are "
        f"{big['arch']['n_embd'] / small['arch']['n_embd']:.0f}x narrower and whose attention reads a cache of "
        f"{small['arch']['block_size']} positions, not {big['arch']['block_size']}. The "
        f"{short[small_name]} model's {small['weight_bytes'] / 1e6:.1f} MB of weights stay in the caches, so the "
        "memory's bound says little about it: its products alone are "
        f"{share(small):.0%} of a token and the rest is the cost of each op. "
        + split_at_one_thread(short[big_name], big['levers'][SPLIT_ALWAYS]['tokens_per_sec'] /
                              big['cached_tokens_per_sec']),
    ]


REST_KERNELS = ("attention kernel", "LayerNorm", "GELU", "residual adds")  # profile groups a token cannot skip


def what_stops_two_threads(dec: dict, fastest: tuple[float, Path | None] | None = None) -> list[str]:
    """For the small model at two threads, against the bound it is judged by (``judged``: the faster of the run's
    read and ``fastest``, the fastest recorded on its machine type): its token split into the products, called
    one after another as the lean step calls them, and the rest; how fast the products would have to be for 60%;
    the same weights read alone in the same order (sums: no arithmetic), the products with each weight in the
    cache, and the rest's kernels as profiled, each as the fraction of the bound a token would reach; whether the
    token rate followed the memory's read across the rounds. Every figure from the run."""
    d = small_at_two(dec)
    if d is None or d.get("weights_read_alone_ms") is None:
        return []
    nbytes, token, products = d["weight_bytes"], d["ms_per_token"], d["products_alone_ms"]
    alone, rest = d["weights_read_alone_ms"], d["ms_per_token"] - d["products_alone_ms"]
    reads = d.get("reads_gbps") or [d["bandwidth_gbps"]]
    read, fraction = judged(d, fastest)
    bound_ms = nbytes / (read * 1e9) * 1000
    against = (f"{fraction:.0%} of the bound at the fastest read recorded on this type, {read:.1f} GB/s in "
               f"`{(fastest[1] or Path('this run')).name}`; {d['fraction_of_bound']:.0%} at this run's "
               f"{d['bandwidth_gbps']:.1f}" if read > d["bandwidth_gbps"] else
               f"{fraction:.0%} of the bound, at this run's read of {read:.1f} GB/s")
    moved = (f"The memory's read at two threads moved between {min(reads):.1f} and {max(reads):.1f} GB/s within "
             "the run. " if max(reads) > 1.25 * min(reads) else "")
    needed = bound_ms / 0.6 - rest  # ms the products may take for 60% with the rest as it is
    parts = [
        f"What stops the small model at two threads ({against}): {moved}A token took {token:.2f} ms against the "
        f"bound's {bound_ms:.2f} ms. Its products, called one after another from Python as the lean step calls "
        f"them (each call's dispatch included), took {products:.2f} ms ({nbytes / products / 1e6:.1f} GB/s: "
        "`torch.bmm` over the weights' halves, the fastest of the routes measured while building, below), and the "
        f"rest (attention, LayerNorm, GELU, the cache writes, the Python between ops) {rest:.2f} ms. For 60% with "
        "the rest as it is, the products would have to take "
        + (f"{needed:.2f} ms ({nbytes / needed / 1e6:.1f} GB/s)." if needed > 0 else
           "no time at all: the rest alone is over the budget.")
        + f" The same weights read alone in the same order, a sum of each and no arithmetic, took {alone:.2f} ms "
        f"({nbytes / alone / 1e6:.1f} GB/s): products that streamed that fast, with the rest as it is, would reach "
        f"{bound_ms / (alone + rest):.0%} of the bound."]
    in_cache = d.get("products_in_cache_ms")
    if in_cache is not None:
        parts.append(
            f"Each product run again and again on its own weight, so that the weight sits in the cache, took "
            f"{in_cache:.2f} ms for a token's products ({nbytes / in_cache / 1e6:.1f} GB/s), the most the product "
            f"kernel does without waiting on the memory; at that rate, with the rest as it is, a token would reach "
            f"{bound_ms / (in_cache + rest):.0%} of the bound, and a model of {nbytes / 1e6:.0f} MB "
            + (f"against a {d['llc_bytes'] / 2**20:,.0f} MiB last-level cache " if d.get("llc_bytes") else "")
            + "cannot keep its weights there.")
    groups = (d.get("profile") or {}).get("groups_us_per_token") or {}
    kernels = sum(groups.get(g, 0.0) for g in REST_KERNELS) / 1000  # ms
    if kernels:
        parts.append(
            f"The rest's own kernels ({', '.join(REST_KERNELS)}) took {kernels:.2f} ms a token as profiled (the "
            f"profiler adds to each op): the product calls plus those, with no views, cache writes or Python "
            f"between them, would be {products + kernels:.2f} ms, {bound_ms / (products + kernels):.0%} of the bound.")
    parts.append("What is left is the one-row product kernel's rate from memory and the cost of eager PyTorch's ops "
                 "between the products.")
    following = memory_following(d.get("rounds_around") or [])
    if following is not None:
        parts.append(following[1])
    return [" ".join(parts)]


def memory_following(rounds: list[dict], steady: float = 1.25) -> tuple[str, str] | None:
    """Whether a decode's token rate followed the memory's read rate across its timed rounds (each round: its
    tokens/s and the reads right before and after it; the faster of the two is the round's read): "follows"
    when, from the round with the slowest read to the one with the fastest, the token rate rose by at least
    half as much as the read did; "does not follow" when it rose by under a tenth (or fell) while the read rose
    by ``steady``x or more; "partly" between. None when the reads were too steady to tell (under ``steady``x
    apart) or there are fewer than two rounds. Returns (verdict, the sentence saying it with the figures)."""
    if len(rounds) < 2:
        return None
    read = [max(r["read_before_gbps"], r["read_after_gbps"]) for r in rounds]
    slow, fast = min(range(len(rounds)), key=read.__getitem__), max(range(len(rounds)), key=read.__getitem__)
    read_ratio = read[fast] / read[slow]
    if read_ratio < steady:
        return None
    rate_ratio = rounds[fast]["tokens_per_sec"] / rounds[slow]["tokens_per_sec"]
    if rate_ratio >= 1 + 0.5 * (read_ratio - 1):
        verdict, meaning = "follows", "its pace is the memory's"
    elif rate_ratio < 1.1:
        verdict, meaning = "does not follow", "the memory's streaming rate does not set its pace"
    else:
        verdict, meaning = "partly", "the memory sets part of its pace"
    return verdict, (
        f"Across the rounds the read right around a timed decode went from {read[slow]:.1f} to {read[fast]:.1f} "
        f"GB/s ({read_ratio:.2f}x) and the token rate from {rounds[slow]['tokens_per_sec']:,.0f} to "
        f"{rounds[fast]['tokens_per_sec']:,.0f} tokens/s ({rate_ratio:.2f}x): the decode "
        + ("partly follows" if verdict == "partly" else verdict) + f" the memory's rate; {meaning}.")


def split_at_one_thread(model: str, ratio: float) -> str:
    """What the split products at one thread, taken whatever their timing, do against the shipped path's choice."""
    said = (f"Splitting the {model} model's products in two halves at one thread whatever the timing runs at "
            f"{ratio:.2f}x the shipped path's speed: ")
    if ratio < 0.95:
        return said + "on this machine the timing keeps one thread on F.linear, and rightly."
    if ratio > 1.05:
        return said + "the timing's choice missed a faster split here."
    return said + "on this machine the timing takes the split at one thread too."


def llc(d: dict) -> str:
    """The bandwidth buffer against the last-level cache, as far as the run knew its size."""
    if not d.get("llc_bytes"):
        return "far larger than the last-level cache"
    return f"{d['bandwidth_bytes'] / d['llc_bytes']:.0f}x the {d['llc_bytes'] / 2**20:,.0f} MiB last-level cache"


def profile_lines(dec: dict, cols) -> list[str]:
    """Where a token's time goes: torch.profiler's self time per token in groups, with the unprofiled figures."""
    with_profile = [(name, n) for name, n in cols if dec[name][n].get("profile")]
    if not with_profile:
        return []
    groups = list(dec[with_profile[0][0]][with_profile[0][1]]["profile"]["groups_us_per_token"])
    lines = [
        "Where a token's time goes, shipped path: torch.profiler over one decode, each op's own time per token in "
        "groups (us), then the rest of the profiled wall time (the Python between ops, torch's dispatcher, the "
        "profiler's own bookkeeping). The profiler slows every op, most of all the many small ones; the last rows are "
        "without it: all of a token's products alone, called one after another from Python with nothing between "
        "them (each call's dispatch included, so the row can exceed the profiled products' own time; where the run "
        "measured it, the same products each repeated on its own weight, which then sits in the cache), and the "
        "whole token.",
        "",
        "| us per token | " + " | ".join(f"{name.split(' (')[0]}, {n} thr." for name, n in with_profile) + " |",
        "|---|" + "---|" * len(with_profile),
    ]
    for g in groups:
        lines.append(f"| {g} | " + " | ".join(
            f"{dec[name][n]['profile']['groups_us_per_token'][g]:,.0f}" for name, n in with_profile) + " |")
    lines += [
        "| profiled token | " + " | ".join(f"{dec[name][n]['profile']['profiled_us_per_token']:,.0f}"
                                         for name, n in with_profile) + " |",
        "| products alone, unprofiled | " + " | ".join(f"{1000 * dec[name][n]['products_alone_ms']:,.0f}"
                                                     for name, n in with_profile) + " |",
    ]
    if all(dec[name][n].get("products_in_cache_ms") for name, n in with_profile):  # runs since 2026-12-05
        lines.append("| products alone, each weight in the cache, unprofiled | " + " | ".join(
            f"{1000 * dec[name][n]['products_in_cache_ms']:,.0f}" for name, n in with_profile) + " |")
    lines += [
        "| token, unprofiled | " + " | ".join(f"{1000 * dec[name][n]['ms_per_token']:,.0f}"
                                             for name, n in with_profile) + " |",
        "",
    ]
    return lines


DECODE_LEVER_NOTES = [
    "The levers (`src/tinygpt/sampling/generate.py`, `sampling/fast_linear.py`, `model/kv_cache.py`), each keeping "
    "the greedy tokens identical (`tests/sampling/test_generate_fast.py`): the lean cached step (`CachedStep`) runs "
    "a token through the blocks with the same kernels on the same rows as `GPT.forward` (its logits are bit-identical, "
    "tested), without the modules' calls, checks and views, and writes each layer's key and value with one copy "
    "into the preallocated cache; the greedy shortcut (`greedy_token`) takes top_k=1's token from a top-2 when the "
    "largest logit stands alone (softmax over the top 1 is then exactly one-hot, so multinomial could only draw "
    "it; ties and non-finite logits still sample as before); the loop runs under `torch.inference_mode` (no "
    "autograd bookkeeping on any op; the tokens are cloned out as a plain tensor) and with oneDNN off "
    "(`torch.backends.mkldnn.enabled`, restored after): oneDNN computes GELU through a primitive whose setup per "
    "call costs more than a row's GELU, and PyTorch's own kernel gives the same function to float rounding (every "
    "path of the loop takes it, so they agree bit for bit); the split products (`FastDecodeLinear`) compute a "
    "one-row product as one `torch.bmm` over the weight's two row halves, on views the lean step builds once, and "
    "run only where they were timed faster than `F.linear` on the machine at hand, at the thread count in use "
    "(once per process and model, over all of its products in a row, as a token streams them from memory: one "
    "weight timed alone sits in the cache, where the AMD EPYC's split looked no faster): MKL reads a one-row "
    "`F.linear` on one core of an AMD EPYC and slower than its batched product even there, so the split wins at "
    "one thread and two; on an Intel Xeon MKL reads it on both cores and the split loses. The KV cache "
    "was already preallocated and written in place (no `torch.cat`), and `torch.compile` is not used (see "
    "the measurements below).",
]


def hf_lines(r: dict, others) -> list[str]:
    """Our GPT beside transformers' GPT-2 on the same weights, both at once on a core each."""
    found = latest_with("hf", r, others)
    if found is None:
        return []
    path, src = found
    hf = src["hf"]
    any_pair = next(iter(next(iter(hf.values())).values()))["pairs"][0]
    theirs = any_pair["transformers"]
    rows, pair_rows = [], []
    for size, whats in hf.items():
        for what, res in whats.items():
            p0 = res["pairs"][0]["tinygpt"]
            shape = (f"batch {p0['batch'][0]} x {p0['batch'][1]}" if what == "train"
                     else f"prompt {p0['prompt']}, {p0['new_tokens']} new")
            same = "" if what == "train" else str(all(p["identical_tokens"] for p in res["pairs"]))
            label = {"train": "training step", "decode": "cached greedy decoding"}[what]
            rows.append(f"| {size} ({p0['params'] / 1e6:.1f}M) | {label} | {shape} | "
                        f"{res['transformers_tokens_per_sec']:,.1f} | {res['tinygpt_tokens_per_sec']:,.1f} | "
                        f"{res['ratio']:.2f} | >= 1: {mark(res['ratio'] >= 1)} | {same} |")
            for i, p in enumerate(res["pairs"], 1):
                ours, them = p["tinygpt"], p["transformers"]
                ratio = ours["tokens_per_sec"] / them["tokens_per_sec"]
                pair_rows.append(f"| {size} | {label} | {i} | {ours['core']} | {them['tokens_per_sec']:,.1f} | "
                                 f"{ours['tokens_per_sec']:,.1f} | {ratio:.2f} "
                                 f"| {p.get('tokens_equal_before_first_difference', '')} | "
                                 f"{fmt(p.get('other_processes_cores'), '.2f')} |")
    return [
        "## Side by side with transformers",
        "",
        f"Our GPT and `transformers`' `GPT2LMHeadModel` (transformers {theirs.get('transformers')}, its default "
        f"attention, `{theirs.get('attention')}`) on the same random weights: our GPT configured as GPT-2 (biases, "
        "tanh GELU), its weights copied into transformers' model by `tinygpt.model.hf_gpt2`. Both programs at once, "
        "each in its own process pinned to its own core with one thread, held until both have built their model "
        "and then started together, the cores swapped between pairs; medians over the pairs. A training step is "
        "forward, backward and a fused AdamW step on random tokens (transformers called as its users call it, "
        "`labels=input_ids`), the median of its timed steps after one warm-up step; decoding is cached greedy "
        "decoding at batch 1 from a random prompt (ours `generate(top_k=1)` after `use_fast_decode`, as the "
        "sampling CLI; theirs `generate(do_sample=False, use_cache=True)`), the best of its runs after a warm-up, "
        "and the two sides' tokens compared." + source_note(path, src),
        "",
        "| model | what | batch | transformers tokens/s | tinygpt tokens/s | ratio | target | same greedy tokens |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "| model | what | pair | tinygpt core | transformers tokens/s | tinygpt tokens/s | ratio | greedy tokens equal "
        "before the first difference | other processes (cores) |",
        "|---|---|---|---|---|---|---|---|---|",
        *pair_rows,
        "",
        "At the default model's size a decoded token is almost all per-token overhead on both sides (the decoding "
        "section above): transformers' `generate` spends more of it in Python (a module call per layer and "
        "sub-layer, its logits processors and stopping criteria, a cache grown by `torch.cat` every token), so that "
        "ratio measures overhead, not arithmetic. At GPT-2's size both read about half a gigabyte of weights per "
        "token and both training steps run the same large matrix products, so the two land close together.",
        "",
    ]


def attention_lines(r: dict) -> list[str]:
    """The math path against the fused kernel."""
    lines = [
        "## Attention: the math path against the fused kernel",
        "",
        "![attention time and memory against T](records/benchmark/attention.png)",
        "",
        "| T | math ms | sdpa ms | math MiB | sdpa MiB |",
        "|---|---|---|---|---|",
    ]
    for t, a in sorted(r["attention"].items(), key=lambda kv: int(kv[0])):
        lines.append(f"| {t} | {a['math']['fwd_bwd_ms']:.2f} | {a['sdpa']['fwd_bwd_ms']:.2f} | "
                     f"{a['math']['peak_mib_above_start']:.0f} | {a['sdpa']['peak_mib_above_start']:.0f} |")
    lines += [
        "",
        "The math path builds the (T, T) weight matrix (for maps and diagnostics); the fused kernel never does, "
        "so its memory grows with T, not T², and training uses it.",
        "",
    ]
    return lines


def lever_lines(r: dict, earlier) -> list[str]:
    """One run per speed lever (this run's, else the latest earlier run that has them) and what became of each."""
    lines: list[str] = []
    lever_run = r if r.get("levers") else next((e for _, e in reversed(earlier) if e.get("levers")), None)
    if lever_run:
        base = lever_run["levers"][0]
        source = "" if lever_run is r else (
            " From `" + next(p.name for p, e in earlier if e is lever_run) + "`, the latest JSON with levers "
            "(the run above did not repeat them).")
        lines += [
            f"## Levers, one at a time ({lever_run['lever_steps']} steps each, back to back)",
            "",
            f"Each row is one `python train.py` run on the same data with one switch changed from the default "
            f"(validation and attention maps every {lever_run['lever_steps'] // 2} steps in all rows but the one that "
            "changes validation). A lever becomes a default only where the loss is unchanged: the training loss "
            "column shows it is (bit-identical where the arithmetic is the same). Single runs: differences of a few "
            "ms per step between rows whose step does the same arithmetic (maps, loggers, the heap trim) are this "
            "machine's run-to-run noise, not the lever." + source,
            "",
            "| lever | wall s | ms/step (median) | peak MiB | train loss | verdict |",
            "|---|---|---|---|---|---|",
        ]
        for lv in lever_run["levers"]:
            dw = "" if lv is base else f" ({lv['wall_s'] - base['wall_s']:+.1f})"
            ds = "" if lv is base else f" ({lv['step_ms'] - base['step_ms']:+.1f})"
            dm = "" if lv is base else f" ({lv['peak_rss_mib'] - base['peak_rss_mib']:+.0f})"
            lines.append(f"| {lv['lever']} | {lv['wall_s']:.1f}{dw} | {lv['step_ms']:.1f}{ds} | "
                         f"{lv['peak_rss_mib']:.0f}{dm} | {lv['train_loss']:.4f} | {VERDICT.get(lv['lever'], '')} |")
        lines += [
            "",
            "Also changed, not a switch: a warm data cache is found without importing `datasets` (a local text "
            "file is hashed as read; ~90 MiB and ~1 s less at start-up), and the attention PNGs are drawn on a "
            "background thread while training goes on (the probe itself runs on the training thread), each figure "
            "laid out once and only its heatmaps and title redrawn (matplotlib's blitting; measured below). "
            "Drawn in full, the maps had slowed the validations next to them on 2 cores. "
            "Per step, without changing what is logged or computed: the training loss goes through `self.log` "
            "only on the steps the loggers take; the stability probes reach the loggers once, directly, instead "
            "of being re-sent by Lightning at every later logging step; ThroughputMonitor gets plain functions "
            "(Hydra checks a `_partial_` on every call); on the CPU the clipping skips torch's multiply-by-1.0 of "
            "every gradient under the limit (bit-identical). At the end, `train.py` skips the interpreter's "
            "teardown of the imported modules (`src/tinygpt/runtime/fast_exit.py`).",
            "",
        ]
    return lines


def gpu_lines() -> list[str]:
    return [
        "## GPU",
        "",
        "`experiment=gpu_small` is nanoGPT's GPU recipe (10.7M model, context 256, batch 64): bf16-mixed, the fused "
        "attention kernel, `compile=true` optional. No GPU was lent to the sessions that measured this page, so "
        "the GPU path is untested here: it runs a few steps on the CPU in the tests (bf16-mixed included), nothing "
        "more. nanoGPT reaches val loss 1.4697 in about 3 minutes on one A100.",
        "",
    ]


FULL = ("reference", "wall_s", "generate", "attention", "mfu", "machine")  # what a full benchmark run writes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/benchmark_report.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", type=Path, nargs="+",
                    help="JSONs written by scripts/benchmark.py --out: the last full run is reported, every full run "
                         "is in the runs table, and partial runs (--sweep-only) fill the sections they measured")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = ap.parse_args(argv)
    runs = []
    for path in args.json:
        if not path.is_file():
            ap.error(f"{path} is not a file written by scripts/benchmark.py --out.")
        runs.append((path, json.loads(path.read_text())))
    full = [i for i, (_, r) in enumerate(runs) if all(k in r for k in FULL)]
    if not full:
        missing = [k for k in FULL if k not in runs[-1][1]]
        ap.error(f"{runs[-1][0]} lacks {', '.join(missing)}: write a full run with scripts/benchmark.py "
                 "(not --generate-only or --sweep-only).")
    last_path, r = runs[full[-1]]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    (args.out.parent / "records" / "benchmark").mkdir(parents=True, exist_ok=True)
    others = [run for i, run in enumerate(runs) if i != full[-1]]
    report(r, last_path, args.out, [run for run in others[:full[-1]] if "wall_s" in run[1]], others,
           later=runs[full[-1] + 1:])
    print(f"wrote {args.out} and {args.out.parent / 'records' / 'benchmark' / 'attention.png'}")
    return 0
