"""Is this GPU machine ready? One short plan of checks, each a subprocess with its own time limit, the whole plan
within 8 minutes on one GPU: the GPU's figures (a bf16 matmul peak, KV-cache decoding), the default run on the GPU
(bf16-mixed, fused SDPA), ``experiment=gpu_small`` with torch.compile off and on, FSDP on one GPU, DDP over all of
them when more than one is visible, and sampling from the default run's checkpoint with and without the KV cache.

Each train.py check runs into ``<out>/<name>`` (``hydra.run.dir``, CSV logger only) and its row is read from the
summary.json it writes there; every check's stdout and stderr go to ``<out>/logs/<name>.{log,err}``. The results:
``<out>/gpu_check.json`` and a short table in ``<out>/gpu_check.md``. Without a GPU it says so in one line and exits 0.

    python scripts/gpu_check.py                      # all checks, results under outputs/gpu_check/<time>
    python scripts/gpu_check.py --out DIR --only gpu_small_compile_off
    python scripts/gpu_check.py --dry-run --gpus 2   # the plan for 2 GPUs; runs nothing (works without a GPU)

Written on a machine without a GPU: the plan and the parsing are tested there, the checks themselves are not.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from tinygpt.bench.micro import SMALL, generation_speed, matmul_peak_gflops
from tinygpt.bench.programs import ROOT
from tinygpt.runtime.console import fmt
from tinygpt.runtime.errors import OneLineParser

BUDGET_S = 480  # the whole plan, on one GPU: 8 minutes
STEPS = 300  # training steps of the default and gpu_small checks
PARALLEL_STEPS = 200  # training steps of the FSDP and DDP checks (the default model)
GPU_RUN = ["trainer.accelerator=gpu", "trainer.precision=bf16-mixed"]  # what trainer=gpu sets, for fsdp/ddp
# dense bf16 tensor-core peaks (FLOP/s) from NVIDIA's datasheets, most specific name first; Lightning's table
# (get_available_flops) is asked for any other GPU. Its H200 entries are the sparse figures (twice these).
DENSE_BF16_PEAK = (("h200 nvl", 835e12), ("h200", 989e12), ("h100 pcie", 756e12), ("h100 nvl", 835e12),
                   ("h100", 989e12), ("a100", 312e12), ("l40s", 362e12), ("a10g", 70e12))


@dataclass(frozen=True)
class Check:
    """One check of the plan: a command line run from the checkout's root, with its time limit."""

    name: str
    what: str
    argv: list[str]
    timeout_s: int
    kind: str  # train (a train.py run), sample (scripts/sample.py) or figures (this module's --figures)
    needs: str | None = None  # a check that must have completed first (its run dir is read)


@dataclass
class Result:
    """One check's row of gpu_check.json and gpu_check.md."""

    name: str
    status: str  # completed | failed | timeout | skipped, or a run's own summary status (diverged, ...)
    exit_code: int | None = None
    seconds: float | None = None
    tokens_per_sec: float | None = None
    val_loss: float | None = None
    train_loss: float | None = None
    steps: int | None = None
    peak_rss_mib: float | None = None  # the process's peak resident memory (host), from /usr/bin/time
    mfu: float | None = None  # against the GPU's dense bf16 peak from its datasheet
    mfu_measured: float | None = None  # against the bf16 matmul peak the figures check measured
    note: str = ""
    error_tail: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- the plan


def python_cmd(*args: str) -> list[str]:
    return [sys.executable, *args]


def train_check(name: str, what: str, overrides: list[str], out: Path, timeout_s: int) -> Check:
    """A train.py run into <out>/<name>, CSV logger only (no W&B), its summary.json read afterwards."""
    argv = python_cmd("train.py", *overrides, "logger=csv", f"hydra.run.dir={out / name}")
    return Check(name, what, argv, timeout_s, "train")


def figures_path(out: Path) -> Path:
    return out / "figures" / "figures.json"


def plan(out: Path, n_gpus: int) -> list[Check]:
    """The checks in the order they run, with their time limits (within BUDGET_S: 410 s on one GPU, 470 s with
    DDP). The figures come first (a quick sign the GPU works, and the peak the MFUs are taken against), the
    compiled run last (its compile time is the least certain)."""
    checks = [
        Check("figures", "bf16 matmul peak, KV-cache vs recomputed decoding of the 10.7M model, on cuda:0",
              python_cmd("-m", "tinygpt.bench.gpu_check", "--figures", str(figures_path(out))), 40, "figures"),
        train_check("default", "the default run on the GPU: trainer=gpu (bf16-mixed, fused SDPA)",
                    ["trainer=gpu", f"trainer.max_steps={STEPS}"], out, 50),
    ]
    for name, flag, what in (("kv_cache", [], "with the KV cache"), ("no_cache", ["--no-cache"], "recomputing")):
        argv = python_cmd("scripts/sample.py", "--ckpt", str(out / "default"), "--device", "cuda", "--top-k", "1",
                          "--max-new-tokens", "200", "--prompt", "ROMEO:", *flag)
        checks.append(Check(name, f"scripts/sample.py on the default run's checkpoint, greedy, {what}", argv, 25,
                            "sample", needs="default"))
    checks += [
        train_check("gpu_small_compile_off", "experiment=gpu_small (10.7M, batch 64 x 256), compile off",
                    ["experiment=gpu_small", f"trainer.max_steps={STEPS}", "compile=false"], out, 60),
        train_check("fsdp_1gpu", "trainer=fsdp on one GPU, bf16-mixed",
                    ["trainer=fsdp", "trainer.devices=1", *GPU_RUN, f"trainer.max_steps={PARALLEL_STEPS}"], out, 60),
    ]
    if n_gpus > 1:
        checks.append(train_check(f"ddp_{n_gpus}gpu", f"trainer=ddp over {n_gpus} GPUs, bf16-mixed",
                                  ["trainer=ddp", f"trainer.devices={n_gpus}", *GPU_RUN,
                                   f"trainer.max_steps={PARALLEL_STEPS}"], out, 60))
    checks.append(train_check("gpu_small_compile_on", "experiment=gpu_small, torch.compile on (compile time counted)",
                              ["experiment=gpu_small", f"trainer.max_steps={STEPS}", "compile=true"], out, 150))
    return checks


def shown(argv: list[str]) -> str:
    """A command line as a person would type it (``python`` for this interpreter, paths in the checkout relative)."""
    return shlex.join(["python" if a == sys.executable else a for a in argv]).replace(f"{ROOT}/", "")


def show_plan(checks: list[Check], n_gpus: int, budget_s: float, note: str = "") -> str:
    """The plan as printed by --dry-run and before a run: one header line, then each check and its command."""
    lines = [f"gpu-check plan for {n_gpus} GPU{'s' if n_gpus != 1 else ''}{note}: {len(checks)} "
             f"check{'s' if len(checks) != 1 else ''}, {sum(c.timeout_s for c in checks)} s of time limits within "
             f"a budget of {budget_s:.0f} s"]
    total = sum(c.timeout_s for c in checks)
    if total > budget_s:  # the checks run in order until the budget is spent: say which could be cut
        start, cut = 0, []
        for c in checks:
            if budget_s - start < 10:
                cut.append(c.name)
            start += c.timeout_s
        lines[0] = lines[0].replace(" within a budget", " over a budget")
        lines.append(f"more than the budget: the checks run in this order until it is spent; if each took its whole "
                     f"limit, these would be skipped: {', '.join(cut) or 'none (the last gets less time)'}")
    for i, c in enumerate(checks, 1):
        lines.append(f"{i}. {c.name} ({c.timeout_s} s): {c.what}")
        lines.append(f"   {shown(c.argv)}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- running a check


def run_check(check: Check, out: Path, timeout_s: float) -> tuple[int | None, float, float | None]:
    """Run one check in its own process group: (exit code or None on timeout, seconds, peak RSS MiB or None).
    At the time limit the whole group gets SIGTERM (a train.py run then writes its partial summary), then
    SIGKILL 20 s later; the same on Ctrl-C. stdout and stderr go to <out>/logs/<name>.log and .err."""
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    timing = logs / f"{check.name}.time"
    wrap = ["/usr/bin/time", "-f", "%M", "-o", str(timing)] if Path("/usr/bin/time").exists() else []
    env = {**os.environ, "WANDB_MODE": "offline"}
    t0 = time.perf_counter()
    with open(logs / f"{check.name}.log", "w") as log, open(logs / f"{check.name}.err", "w") as err:
        proc = subprocess.Popen([*wrap, *check.argv], cwd=ROOT, stdout=log, stderr=err, env=env,
                                start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
            stop_group(proc)
        except KeyboardInterrupt:  # Ctrl-C: the check is in its own session, so it is stopped here
            stop_group(proc)
            raise
    return code, time.perf_counter() - t0, peak_rss_mib(timing)


def stop_group(proc: subprocess.Popen, grace_s: float = 20) -> None:
    """SIGTERM to the process group (train.py stops after its step and writes a partial summary), SIGKILL after."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def peak_rss_mib(timing: Path) -> float | None:
    """The peak RSS /usr/bin/time wrote (KiB, its last numeric line), in MiB; None without one."""
    if not timing.exists():
        return None
    numbers = [line for line in timing.read_text().splitlines() if line.strip().isdigit()]
    return int(numbers[-1]) / 1024 if numbers else None


def error_tail(out: Path, name: str, chars: int = 2000) -> str:
    """The end of a check's stderr (its stdout when stderr is empty): what a failed check said last."""
    for suffix in (".err", ".log"):
        path = out / "logs" / f"{name}{suffix}"
        text = path.read_text(errors="replace").strip() if path.exists() else ""
        if text:
            return text[-chars:]
    return ""


# ----------------------------------------------------------------------------- reading what a check wrote


def base_status(code: int | None) -> str:
    return "timeout" if code is None else "completed" if code == 0 else "failed"


def train_result(name: str, run_dir: Path, code: int | None, seconds: float, rss: float | None = None) -> Result:
    """A train.py check's row from its summary.json: a run that exited 0 has its own status (completed, diverged,
    leaky); one that failed or ran out of time keeps that, with what its summary says in the note."""
    row = Result(name, base_status(code), code, seconds, peak_rss_mib=rss)
    path = run_dir / "summary.json"
    if not path.exists():
        row.note = "no summary.json"
        return row
    s = json.loads(path.read_text())
    if code == 0:
        row.status = s.get("status", "completed")
    elif s.get("status") or s.get("error"):
        row.note = f"summary: {s.get('status')}" + (f", {str(s['error'])[:200]}" if s.get("error") else "")
    row.tokens_per_sec, row.val_loss, row.train_loss, row.steps = (s.get(k) for k in (
        "tokens_per_sec", "val_loss", "train_loss", "steps"))
    row.details = {"step_seconds_median": s.get("step_seconds_median"), "train_seconds": s.get("train_seconds"),
                   "world_size": s.get("world_size"), "n_params": s.get("n_params"),
                   "flops_per_token": flops_per_token(s)}
    return row


def flops_per_token(summary: dict) -> float | None:
    """Training FLOPs per token of the run's model (GPT.flops_per_token), the model built on the meta device."""
    from tinygpt.model.gpt import GPT, GPTConfig

    model_cfg, vocab = summary.get("config", {}).get("model"), summary.get("vocab_size")
    if not model_cfg or not vocab:
        return None
    with torch.device("meta"):
        return GPT(GPTConfig(vocab_size=vocab, **model_cfg)).flops_per_token()


def sample_result(name: str, out: Path, code: int | None, seconds: float, rss: float | None = None) -> Result:
    """A sampling check's row: its exit code, and the text it printed (in details)."""
    row = Result(name, base_status(code), code, seconds, peak_rss_mib=rss)
    log = out / "logs" / f"{name}.log"
    row.details = {"text": log.read_text(errors="replace").strip() if log.exists() else None}
    return row


def figures_result(name: str, path: Path, code: int | None, seconds: float, rss: float | None = None) -> Result:
    """The figures check's row: what --figures wrote (peaks, decoding speeds) in details."""
    row = Result(name, base_status(code), code, seconds, peak_rss_mib=rss)
    if path.exists():
        row.details = json.loads(path.read_text())
        dec = row.details.get("decode", {})
        row.tokens_per_sec = dec.get("cached_tokens_per_sec")
        row.note = (f"{row.details.get('gpu')}: bf16 matmul {row.details['matmul_peak_flops'] / 1e12:.0f} TFLOP/s"
                    f" measured; decoding {dec.get('speedup', float('nan')):.1f}x faster with the KV cache")
    elif code == 0:
        row.status, row.note = "failed", f"no {path.name}"
    return row


def add_mfu(rows: list[Result], figures: dict) -> None:
    """Each train row's MFU per GPU: tokens/s x FLOPs per token / (GPUs x peak), against the datasheet's dense bf16
    peak and against the measured matmul peak."""
    for row in rows:
        fpt, world = row.details.get("flops_per_token"), row.details.get("world_size") or 1
        if not fpt or not row.tokens_per_sec:
            continue
        achieved = row.tokens_per_sec * fpt / world
        if figures.get("spec_peak_flops"):
            row.mfu = achieved / figures["spec_peak_flops"]
        if figures.get("matmul_peak_flops"):
            row.mfu_measured = achieved / figures["matmul_peak_flops"]


def compare_samples(rows: dict[str, Result]) -> None:
    """Note on the KV-cache row whether greedy decoding with the cache printed what recomputing printed."""
    cached, plain = rows.get("kv_cache"), rows.get("no_cache")
    if not cached or not plain or cached.status != "completed" or plain.status != "completed":
        return
    same = cached.details.get("text") == plain.details.get("text")
    cached.details["identical_to_no_cache"] = same
    cached.note = "same text as without the cache" if same else "text differs from the run without the cache"


# ----------------------------------------------------------------------------- the figures (on the GPU)


def gpu_figures(device: torch.device, matmul_n: int = 8192, arch: dict = SMALL, new_tokens: int = 200) -> dict:
    """The GPU's figures: its name, the bf16 matmul rate reached (FLOP/s), its datasheet peak, and greedy
    decoding of the GPU recipe's model with and without the KV cache (scripts/benchmark.py's generation figures,
    on this device: micro's measurements). Runs in the --figures subprocess."""
    torch.manual_seed(0)
    on_gpu = device.type == "cuda"
    result = {"gpu": torch.cuda.get_device_name(device) if on_gpu else str(device),
              "torch": torch.__version__, "cuda": torch.version.cuda,
              "matmul_peak_flops": 1e9 * matmul_peak_gflops(matmul_n, 10, device, torch.bfloat16),
              "spec_peak_flops": spec_peak_flops(device),
              "decode": generation_speed(arch, new_tokens, device=device)}
    if on_gpu:
        result["peak_gpu_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
        result["gpu_memory_gib"] = torch.cuda.get_device_properties(device).total_memory / 2**30
    return result


def spec_peak_flops(device: torch.device) -> float | None:
    """The GPU's dense bf16 peak from DENSE_BF16_PEAK, else Lightning's table; None off the GPU or for an unknown
    one."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device).lower()
    for key, flops in DENSE_BF16_PEAK:
        if key in name:
            return flops
    from lightning.fabric.utilities.throughput import get_available_flops

    return get_available_flops(device, torch.bfloat16)


# ----------------------------------------------------------------------------- the whole plan and its reports


def run_plan(checks: list[Check], out: Path, budget_s: float) -> list[Result]:
    """Each check in turn, each within its own limit and what is left of the budget; a check whose prerequisite
    did not complete, or that would get under 10 s, is skipped."""
    deadline = time.monotonic() + budget_s
    rows: dict[str, Result] = {}
    for check in checks:
        left = deadline - time.monotonic()
        if check.needs and (check.needs not in rows or rows[check.needs].status != "completed"):
            rows[check.name] = Result(check.name, "skipped", note=f"needs {check.needs}, which did not complete")
        elif left < 10:
            rows[check.name] = Result(check.name, "skipped", note=f"out of time ({budget_s:.0f} s budget)")
        else:
            print(f"gpu-check: {check.name} (up to {min(check.timeout_s, left):.0f} s) ...", flush=True)
            rows[check.name] = result_of(check, out, *run_check(check, out, min(check.timeout_s, left)))
            print(f"gpu-check: {check.name}: {rows[check.name].status} in {rows[check.name].seconds:.0f} s", flush=True)
    finish_rows(rows)
    return list(rows.values())


def result_of(check: Check, out: Path, code: int | None, seconds: float, rss: float | None) -> Result:
    """A finished check's row, read from what it wrote; a failure's error tail attached."""
    if check.kind == "train":
        row = train_result(check.name, out / check.name, code, seconds, rss)
    elif check.kind == "sample":
        row = sample_result(check.name, out, code, seconds, rss)
    else:
        row = figures_result(check.name, figures_path(out), code, seconds, rss)
    if row.status != "completed":
        row.error_tail = error_tail(out, check.name)
    return row


def finish_rows(rows: dict[str, Result]) -> None:
    """What needs several rows: the MFUs (the figures' peaks) and the KV cache's comparison."""
    figures = rows["figures"].details if "figures" in rows else {}
    add_mfu([r for r in rows.values() if r.name != "figures"], figures)
    compare_samples(rows)


def short_note(row: Result) -> str:
    """The note column: the row's note, else the last line of a failure's error tail."""
    tail = (row.error_tail or "").strip().splitlines()
    return (row.note or (tail[-1] if tail else "")).replace("|", "/")[:160]


def markdown(rows: list[Result], header: dict) -> str:
    """gpu_check.md: what ran where, and one line per check."""
    lines = [f"# gpu-check {header['started']}", "",
             f"{header['gpus']} GPU(s), torch {header['torch']}; {header['passed']}/{len(rows)} checks completed "
             f"in {header['wall_s']:.0f} s (budget {header['budget_s']:.0f} s). Each check's output: `logs/`; "
             "each train.py run: its own dir here.", "",
             "| check | status | s | tokens/s | val loss | MFU (datasheet) | MFU (measured peak) | note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.name} | {r.status} | {fmt(r.seconds, '.0f')} | {fmt(r.tokens_per_sec, ',.0f')} | "
                     f"{fmt(r.val_loss, '.4f')} | {fmt(r.mfu, '.1%')} | {fmt(r.mfu_measured, '.1%')} | "
                     f"{short_note(r)} |")
    return "\n".join(lines) + "\n"


def write_reports(out: Path, rows: list[Result], header: dict) -> tuple[Path, Path]:
    """<out>/gpu_check.json (the header, the plan's rows in full) and <out>/gpu_check.md (the short table)."""
    out.mkdir(parents=True, exist_ok=True)
    data = {**header, "results": [asdict(r) for r in rows]}
    json_path, md_path = out / "gpu_check.json", out / "gpu_check.md"
    json_path.write_text(json.dumps(data, indent=2, default=str))
    md_path.write_text(markdown(rows, header))
    return json_path, md_path


# ----------------------------------------------------------------------------- the command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = OneLineParser("scripts/gpu_check.py", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="results dir (default: outputs/gpu_check/<time>)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and run nothing (works without a GPU)")
    ap.add_argument("--only", action="append", metavar="NAME", help="run only this check (repeatable)")
    ap.add_argument("--gpus", type=int, help="plan for this many GPUs (default: the visible ones; 1 without any)")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help=f"seconds for the whole plan (default {BUDGET_S})")
    ap.add_argument("--figures", type=Path, metavar="JSON", help=argparse.SUPPRESS)  # the figures check itself
    args = ap.parse_args(argv)
    if args.gpus is not None and args.gpus < 1:
        ap.error(f"--gpus={args.gpus} must be >= 1.")
    if not args.budget > 0:
        ap.error(f"--budget={args.budget:g} must be a positive number of seconds.")
    return args


def no_gpu_line() -> str:
    if torch.version.cuda is None and shutil.which("nvidia-smi"):  # a GPU machine with a CPU-only torch
        return (f"gpu-check: torch {torch.__version__} is a CPU-only build, and this machine has an NVIDIA driver "
                "(nvidia-smi); install a CUDA build of torch into the venv, then make gpu-check.")
    return (f"gpu-check: no CUDA GPU visible (torch {torch.__version__}); nothing to run. "
            "Run it on a GPU machine: make gpu-check")


def selected(checks: list[Check], only: list[str] | None) -> list[Check]:
    """The checks --only names (all without it); an unknown name is an error that lists the known ones."""
    if not only:
        return checks
    names = [c.name for c in checks]
    unknown = [n for n in only if n not in names]
    if unknown:
        print(f"error: gpu-check: no check named {', '.join(unknown)}; the checks: {', '.join(names)}",
              file=sys.stderr)
        raise SystemExit(2)
    wanted = set(only)
    for c in reversed(checks):  # a check's prerequisite comes with it (kv_cache reads the default run's dir)
        if c.name in wanted and c.needs:
            wanted.add(c.needs)
    return [c for c in checks if c.name in wanted]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.figures:  # the figures check, in its own process on the GPU
        args.figures.parent.mkdir(parents=True, exist_ok=True)
        args.figures.write_text(json.dumps(gpu_figures(torch.device("cuda")), indent=2))
        return 0
    has_gpu = torch.cuda.is_available()
    n_gpus = args.gpus or (torch.cuda.device_count() if has_gpu else 0) or 1
    out = args.out or ROOT / "outputs" / "gpu_check" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    checks = selected(plan(out.resolve(), n_gpus), args.only)
    if args.dry_run:
        print(show_plan(checks, n_gpus, args.budget, "" if has_gpu or args.gpus else " (no GPU visible here)"))
        return 0
    if not has_gpu:
        line = no_gpu_line()
        print(line)
        return 1 if "CPU-only build" in line else 0
    started = datetime.now().isoformat(timespec="seconds")
    t0 = time.perf_counter()
    print(show_plan(checks, n_gpus, args.budget), flush=True)
    rows = run_plan(checks, out.resolve(), args.budget)
    header = {"started": started, "gpus": n_gpus, "torch": torch.__version__, "budget_s": args.budget,
              "wall_s": time.perf_counter() - t0, "passed": sum(r.status == "completed" for r in rows),
              "plan": [{**asdict(c), "command": shown(c.argv)} for c in checks]}
    json_path, md_path = write_reports(out, rows, header)
    print(md_path.read_text())
    print(f"gpu-check: {header['passed']}/{len(rows)} checks completed; {json_path} and {md_path}")
    return 0 if header["passed"] == len(rows) else 1


if __name__ == "__main__":  # the figures check runs as `python -m tinygpt.bench.gpu_check --figures JSON`
    sys.exit(main())
