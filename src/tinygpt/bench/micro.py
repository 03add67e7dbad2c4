"""Micro-benchmarks in this process: nanoGPT's training loop written out around tinygpt's GPT (the "plain loop"),
one training step of several variants taking turns (``interleaved_steps``: no drift of the machine can skew
their ratios), the attention math path against the fused kernel, KV-cache generation, the matmul peak.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import torch

from tinygpt.data.datamodule import TextDataModule
from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.train.optim import clip_grad_norm_cpu_, lr_at, param_groups

BABY = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, dropout=0.0, bias=False)  # the default model
SMALL = dict(n_layer=6, n_head=6, n_embd=384, block_size=256, dropout=0.0, bias=False)  # the GPU recipe's model


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


@torch.no_grad()
def generation_speed(arch: dict, new_tokens: int = 200, vocab: int = 65, repeats: int = 2,
                     prompt_len: int = 1, device: str | torch.device = "cpu") -> dict:
    """Greedy decoding at batch 1 from a ``prompt_len``-token prompt, with and without the KV cache (best
    of ``repeats``, timed with the device's queue drained); the outputs must be identical."""
    from tinygpt.model.fast_linear import use_fast_decode
    from tinygpt.model.generate import generate

    device = torch.device(device)
    torch.manual_seed(0)
    model = use_fast_decode(GPT(GPTConfig(vocab_size=vocab, **arch)).eval()).to(device)  # its fast path: CPU only
    new_tokens = min(new_tokens, arch["block_size"] - prompt_len)  # within the context: the cache's whole point
    prompt = torch.randint(0, vocab, (1, prompt_len), generator=torch.Generator().manual_seed(0)).to(device)
    out, best = {}, {}
    for use_cache in (True, False):
        times = []
        for _ in range(repeats):
            def run(use_cache=use_cache):
                out[use_cache] = generate(model, prompt, new_tokens, top_k=1, use_cache=use_cache)

            times.append(_timed_call(run, device))
        best[use_cache] = min(times)
    return {"prompt_tokens": prompt_len, "new_tokens": new_tokens,
            "identical": bool(torch.equal(out[True], out[False])),
            "cached_tokens_per_sec": new_tokens / best[True], "uncached_tokens_per_sec": new_tokens / best[False],
            "speedup": best[False] / best[True]}


def matmul_peak_gflops(n: int = 2048, repeats: int = 5, device: str | torch.device = "cpu",
                       dtype: torch.dtype = torch.float32) -> float:
    """The matmul rate ``device`` reaches on a large square product in ``dtype`` (best of ``repeats``; on the
    CPU fp32 with torch's default threads): the denominator of MFU."""
    device = torch.device(device)
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    _timed_call(lambda: a @ b, device)  # warm up (on a GPU: cuBLAS picks its kernel)
    best = min(_timed_call(lambda: a @ b, device) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _timed_call(fn, device: torch.device | None = None) -> float:
    """Seconds ``fn()`` takes, a GPU's queue drained before and after."""
    gpu = device is not None and device.type == "cuda"
    if gpu:
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn()
    if gpu:
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def baby_flops_per_token(vocab: int = 65) -> float:
    """Training FLOPs per token of the CPU recipe's model (6N + 12 L C T, GPT.flops_per_token)."""
    return GPT(GPTConfig(vocab_size=vocab, **BABY)).flops_per_token()


# One switch at a time against the default recipe, on shorter runs (each its own train.py, back to back).
