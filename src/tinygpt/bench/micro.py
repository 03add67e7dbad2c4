"""Micro-benchmarks in this process: nanoGPT's training loop written out around tinygpt's GPT (the "plain loop"),
one training step of several variants taking turns (``interleaved_steps``: no drift of the machine can skew
their ratios), the attention math path against the fused kernel, KV-cache generation, the matmul peak.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tinygpt.model.config import AttnConfig
from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.train.optim import clip_grad_norm_cpu_, lr_at, param_groups

if TYPE_CHECKING:  # the data module imports Lightning: not for the side-by-side workers, which import this module
    from tinygpt.data.datamodule import TextDataModule

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

    def ours(fused: bool, backend: str = "sdpa"):
        torch.manual_seed(seed)
        model = GPT(GPTConfig(vocab_size=65, **BABY, attn=AttnConfig(backend=backend)))
        return model, torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99), fused=fused)

    variants = {"tinygpt GPT, fused AdamW (the default)": ours(True), "tinygpt GPT, foreach AdamW": ours(False),
                "tinygpt GPT, torch's clip_grad_norm_": ours(True)}
    clipping = {"tinygpt GPT, torch's clip_grad_norm_": torch.nn.utils.clip_grad_norm_}
    variants["tinygpt GPT, math attention path"] = ours(True, backend="math")
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
                "from tinygpt.model.attention import AttnConfig, CausalSelfAttention\n"
                "def status(key):\n"
                "    line = next(x for x in Path('/proc/self/status').read_text().splitlines() if x.startswith(key))\n"
                "    return int(line.split()[1]) / 1024\n"
                f"a = CausalSelfAttention({heads * head_dim}, {heads}, AttnConfig(backend='{backend}'))\n"
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
    from tinygpt.sampling.fast_linear import use_fast_decode
    from tinygpt.sampling.generate import generate

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


# ----------------------------------------------------------------------------- decoding at the memory limit


class OtherLoad:
    """``with OtherLoad() as load:``: afterwards ``load.cores`` is the CPU the machine spent on other processes
    during the block, in cores (Linux /proc/stat against this process's and its waited-for children's own time;
    None elsewhere). A busy machine skews every timing, most of all those with more than one thread."""

    cores: float | None = None

    def __enter__(self) -> OtherLoad:
        self.start = (time.perf_counter(), _machine_cpu_seconds(), _own_cpu_seconds())
        return self

    def __exit__(self, *exc) -> None:
        wall, machine, own = (b - a if a is not None and b is not None else None for a, b in
                              zip(self.start, (time.perf_counter(), _machine_cpu_seconds(), _own_cpu_seconds()),
                                  strict=True))
        self.cores = None if machine is None else max(0.0, (machine - own) / wall)


def _machine_cpu_seconds() -> float | None:
    """CPU seconds all processes have used since boot (/proc/stat: user, nice, system, irq, softirq, steal)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def cache_bytes(level: int = 3) -> int | None:
    """The size of the CPU's level-``level`` cache in bytes (Linux sysfs), or None where it is not said."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if int((index / "level").read_text()) != level:
                continue
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        return int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
    return None


def streaming_read_gbps(nbytes: int = 0, repeats: int = 5, buffer: torch.Tensor | None = None) -> float:
    """GB/s of one streaming read of ``nbytes`` of fp32 (a tensor's sum, at torch's current thread count), the
    best of ``repeats`` after a first pass that touches every page; or of ``buffer``, made once and read again
    (no first pass: a read right before and after a timing)."""
    x = torch.ones(max(nbytes // 4, 1)) if buffer is None else buffer
    if buffer is None:
        x.sum()
    best = min(_timed_call(x.sum) for _ in range(repeats))
    return x.numel() * 4 / best / 1e9


def memory_bytes_for_bandwidth() -> int:
    """A buffer far larger than the last-level cache (4x, at least 1 GiB), at most a quarter of the memory."""
    l3 = cache_bytes(3) or 32 << 20
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(min(max(1 << 30, 4 * l3), ram // 4))


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of every parameter once (the tied embedding once: a decoded token reads it as the head)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


@torch.no_grad()
def products_alone_seconds(model: torch.nn.Module, repeats: int = 30) -> float:
    """Seconds for every Linear of ``model`` (the head included) applied to one row, in the model's order, with
    nothing between them: the products of one decoded token without the rest of its work (median of
    ``repeats`` passes; each as the lean decode step runs it: the split product on prebuilt blocks where
    use_fast_decode swapped it in and its timing takes it)."""
    from tinygpt.sampling.fast_linear import lean_product

    calls = [(lean_product(m, 1), torch.randn(1, m.in_features)) for m in _linears(model)]
    return _median_seconds(lambda: [product(x, weight, bias) for (product, weight, bias), x in calls], repeats)


@torch.no_grad()
def products_in_cache_seconds(model: torch.nn.Module, repeats: int = 30, calls: int = 10) -> float:
    """Seconds for every Linear of ``model`` applied to one row as the lean decode step runs it, each product
    timed on its own weight ``calls`` times in a row, so that its weight sits in the cache (the median of
    ``repeats`` such runs, per call), summed over the Linears: a token's products without waiting on the
    memory, the most the product kernels do from the cache. A decode of a model larger than the last-level cache cannot
    run its products this fast; one whose products alone take longer than the bound is stopped by the kernels."""
    from tinygpt.sampling.fast_linear import lean_product

    total = 0.0
    for m in _linears(model):
        (product, weight, bias), x = lean_product(m, 1), torch.randn(1, m.in_features)
        run = functools.partial(product, x, weight, bias)
        total += _median_seconds(lambda run=run: [run() for _ in range(calls)], repeats) / calls
    return total


@torch.no_grad()
def weights_read_alone_seconds(model: torch.nn.Module, repeats: int = 30) -> float:
    """Seconds for reading every Linear's weight of ``model`` once, one weight after another in the model's
    order (a sum of each, at torch's thread count): the reads of a token's products without their arithmetic,
    short reads one after another where the bound assumes one long one; no product can stream its weight faster
    (median of ``repeats`` passes)."""
    weights = [m.weight for m in _linears(model)]
    return _median_seconds(lambda: [w.sum() for w in weights], repeats)


def _linears(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """Every Linear of ``model`` (the head included), in the order a token runs them."""
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def _median_seconds(fn, repeats: int) -> float:
    fn()
    times = sorted(_timed_call(fn) for _ in range(repeats))
    return times[len(times) // 2]


DECODE_LEVERS = {  # name -> what the variant turns off (patched in this process only; outputs must not change)
    "all levers (as shipped)": (),
    "without the lean cached step (GPT.forward per token)": ("step",),
    "without the greedy shortcut (softmax + multinomial per token)": ("greedy",),
    "without inference_mode (no_grad alone)": ("inference_mode",),
    "without PyTorch's own kernels (oneDNN's GELU, as in training)": ("native",),
    "split products always, at any thread count (as before)": ("split_any",),
    "without the split products (plain F.linear)": ("no_split",),
    "none of them (the decode path before)": ("step", "greedy", "inference_mode", "native", "split_any"),
}


def _decode_variant(off: tuple):
    """A context in which generate() runs without the levers named in ``off``."""
    import contextlib
    from unittest import mock

    from tinygpt.sampling import generate as gen_module
    from tinygpt.sampling.fast_linear import FastDecodeLinear

    stack = contextlib.ExitStack()
    if "step" in off:
        stack.enter_context(mock.patch.object(gen_module.CachedStep, "for_model", lambda *a, **k: None))
    if "greedy" in off:
        stack.enter_context(mock.patch.object(gen_module, "greedy_token", lambda *a, **k: None))
    if "inference_mode" in off:  # generate stays under its no_grad
        stack.enter_context(mock.patch.object(gen_module, "_no_autograd", contextlib.nullcontext))
    if "native" in off:
        stack.enter_context(mock.patch.object(gen_module, "_native_kernels", contextlib.nullcontext))
    if "split_any" in off:  # whatever its timing says, at any thread count
        stack.enter_context(mock.patch.object(FastDecodeLinear, "split_margin", 0.0))
    if "no_split" in off:
        stack.enter_context(mock.patch.object(FastDecodeLinear, "max_rows", 0))
    return stack


PRODUCT_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::mv", "aten::addmv")
PROFILE_GROUPS = (  # (group, substrings of aten op names), first match wins
    ("matrix-vector products", PRODUCT_OPS),
    ("attention kernel", ("scaled_dot_product", "flash_attention", "softmax")),
    ("LayerNorm", ("layer_norm",)),
    ("GELU", ("gelu",)),
    ("residual adds", ("aten::add",)),
    ("sampling", ("topk", "multinomial", "aten::sum", "_local_scalar_dense", "isfinite", "aten::all", "aten::div")),
    ("cache writes, views, copies, op wrappers", ("copy_", "narrow", "slice", "select", "view", "unbind", "transpose",
                                        "reshape", "as_strided", "permute", "expand", "aten::t", "unsqueeze",
                                        "stack", "aten::cat", "empty", "contiguous", "clone", "_to_copy",
                                        "embedding", "index_select", "aten::to", "detach", "alias", "zeros",
                                        "fill_", "arange", "matmul", "linear")),
)


@torch.no_grad()
def decode_profile(model, prompt: torch.Tensor, new_tokens: int) -> dict:
    """Where a cached greedy token's time goes: torch.profiler over one generate() call, the ops' self time per
    token in groups (``PROFILE_GROUPS``), and the rest of the profiled wall time (Python, the dispatcher between
    ops and the profiler's own bookkeeping). Profiled times run above unprofiled ones; read the shares."""
    from torch.profiler import ProfilerActivity, profile

    from tinygpt.sampling.generate import generate

    generate(model, prompt, new_tokens, top_k=1)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        generate(model, prompt, new_tokens, top_k=1)
        wall = time.perf_counter() - t0
    groups = {name: 0.0 for name, _ in PROFILE_GROUPS}
    groups["other ops"] = 0.0
    ops = []
    for e in prof.key_averages():
        us = e.self_cpu_time_total / new_tokens
        ops.append({"op": e.key, "calls_per_token": e.count / new_tokens, "self_us_per_token": us})
        group = next((name for name, keys in PROFILE_GROUPS if any(k in e.key for k in keys)), "other ops")
        groups[group] += us
    wall_us = 1e6 * wall / new_tokens
    groups["outside the ops (Python, dispatch, profiler)"] = wall_us - sum(groups.values())
    ops.sort(key=lambda o: -o["self_us_per_token"])
    return {"profiled_us_per_token": wall_us, "groups_us_per_token": groups, "top_ops": ops[:12]}


@torch.no_grad()
def decode_at_memory_limit(arch: dict, threads: int, new_tokens: int = 255, vocab: int = 65, rounds: int = 3,
                           bandwidth_bytes: int | None = None, profile: bool = True, repeats: int = 20) -> dict:
    """Cached greedy decoding at batch 1 against the bound that reading every fp32 weight once per token sets:
    weight bytes / the memory's streaming-read rate (a buffer far larger than the last-level cache, at
    ``threads`` threads). The rate is read once before and again right before and after each of the shipped
    path's timed decodes, and the fastest read is the bound: on a virtual machine the rate at two threads can
    change from one second to the next, and a decode timed in a slow spell held against a bound read in a fast
    one, or the other way round, measures the host. Also: the same read of a buffer as large as the weights (a
    cache-resident model can beat the bound), the products alone and the weights read alone in a token's order,
    each lever turned off in turn (``DECODE_LEVERS``, taking turns for ``rounds`` rounds; best of the rounds;
    the greedy tokens of every variant must equal the shipped path's) and a profile of one decode; and how much
    CPU other processes used meanwhile. ``repeats``: of the weights-sized read (the best) and of the products
    and the weights alone (the median)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with OtherLoad() as load:
            result = _decode_at_memory_limit(arch, threads, new_tokens, vocab, rounds, bandwidth_bytes, profile,
                                             repeats)
        return {**result, "other_processes_cores": load.cores}
    finally:
        torch.set_num_threads(before)


def _decode_at_memory_limit(arch: dict, threads: int, new_tokens: int, vocab: int, rounds: int,
                            bandwidth_bytes: int | None, profile: bool, repeats: int) -> dict:
    from tinygpt.sampling.fast_linear import use_fast_decode
    from tinygpt.sampling.generate import generate

    torch.manual_seed(0)
    model = use_fast_decode(GPT(GPTConfig(vocab_size=vocab, **arch)).eval())
    new_tokens = min(new_tokens, arch["block_size"] - 1)
    prompt = torch.randint(0, vocab, (1, 1), generator=torch.Generator().manual_seed(0))
    nbytes = weight_bytes(model)
    buffer = torch.ones(max((bandwidth_bytes or memory_bytes_for_bandwidth()) // 4, 1))  # read around each timing
    reads = [streaming_read_gbps(buffer=buffer)]
    resident = streaming_read_gbps(nbytes, repeats=repeats)
    levers = dict(DECODE_LEVERS)  # one thread may split too (its timing decides): every row at every count
    shipped = next(iter(levers))
    times: dict[str, list[float]] = {name: [] for name in levers}
    outs: dict[str, torch.Tensor] = {}
    for name, off in levers.items():  # warm-up, outside the clock
        with _decode_variant(off):
            outs[name] = generate(model, prompt, new_tokens, top_k=1)
    timings = []  # the shipped path's rounds: (read before, tokens/s, read after)
    for _ in range(rounds):
        for name, off in levers.items():
            if name == shipped:
                before = streaming_read_gbps(repeats=1, buffer=buffer)
            with _decode_variant(off):
                times[name].append(_timed_call(lambda: generate(model, prompt, new_tokens, top_k=1)))
            if name == shipped:
                timings.append((before, new_tokens / times[name][-1], streaming_read_gbps(repeats=1, buffer=buffer)))
                reads += [before, timings[-1][-1]]
    del buffer
    tokens_per_sec = {name: new_tokens / min(t) for name, t in times.items()}
    dram = max(reads)  # the fastest read of the run: the highest bound, the lowest fraction
    bound = dram * 1e9 / nbytes
    products = products_alone_seconds(model, repeats=repeats + 10)
    reads_alone = weights_read_alone_seconds(model, repeats=repeats + 10)
    in_cache = products_in_cache_seconds(model, repeats=repeats + 10)
    return {
        "arch": arch, "threads": threads, "new_tokens": new_tokens, "rounds": rounds, "weight_bytes": nbytes,
        "llc_bytes": cache_bytes(3),
        "bandwidth_bytes": bandwidth_bytes or memory_bytes_for_bandwidth(), "bandwidth_gbps": dram,
        "reads_gbps": reads, "rounds_around": [{"read_before_gbps": b, "tokens_per_sec": t, "read_after_gbps": a,
                                                "fraction_of_bound": t * nbytes / (max(b, a) * 1e9)}
                                               for b, t, a in timings],
        "resident_read_gbps": resident, "bound_tokens_per_sec": bound,
        "cached_tokens_per_sec": tokens_per_sec[shipped], "fraction_of_bound": tokens_per_sec[shipped] / bound,
        "ms_per_token": 1000 / tokens_per_sec[shipped], "products_alone_ms": 1000 * products,
        "weights_read_alone_ms": 1000 * reads_alone, "products_in_cache_ms": 1000 * in_cache,
        "levers": {name: {"tokens_per_sec": tps, "fraction_of_bound": tps / bound,
                          "identical": bool(torch.equal(outs[name], outs[shipped]))}
                   for name, tps in tokens_per_sec.items()},
        "profile": decode_profile(model, prompt, new_tokens) if profile else None,
    }


# ----------------------------------------------------------------------------- side by side with transformers

HF_SIZES = {  # our GPT configured as GPT-2 (biases, tanh GELU); the training batch (rows x tokens), the timed
    # training steps, the prompt, the new tokens and the timed decodes of each
    "baby": {"model": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=65), "batch": (12, 64),
             "steps": 40, "prompt": 8, "new_tokens": 56, "repeats": 10},
    "gpt2": {"model": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257),
             "batch": (1, 1024), "steps": 4, "prompt": 8, "new_tokens": 200, "repeats": 2},
    "tiny": {"model": dict(n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=65), "batch": (2, 32),
             "steps": 2, "prompt": 4, "new_tokens": 8, "repeats": 1},  # --quick (tests)
}


def gpt2_shaped(size: str, seed: int = 0) -> GPT:
    """Our GPT as GPT-2 (bias, tanh GELU, eps 1e-5, no dropout) at one of HF_SIZES, random weights: GPT-2's init
    with the biases and LayerNorm parameters drawn too (so that a bias in the wrong place would show)."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**HF_SIZES[size]["model"], dropout=0.0, bias=True, activation="gelu_tanh"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.02)
            elif ".ln_" in name or name.startswith("ln_f"):
                p.normal_(1.0, 0.1)
    return model


HF_ATTENTION = "sdpa"  # transformers' default attention for GPT-2


def transformers_copy(ours: GPT):
    """transformers' GPT2LMHeadModel with our GPT's weights (tinygpt.model.hf_gpt2's names), with its default
    attention set by name (HF_ATTENTION), so the record says which ran."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from tinygpt.model import hf_gpt2

    config = hf_gpt2.hf_config(ours.config)
    if ours.config.vocab_size <= 50256:  # GPT-2's default special tokens would lie outside the vocabulary
        config.update(bos_token_id=None, eos_token_id=None)
    theirs = GPT2LMHeadModel(GPT2Config.from_dict(config))
    theirs.set_attn_implementation(HF_ATTENTION)
    result = theirs.load_state_dict(hf_gpt2.to_hf_state_dict(ours), strict=False)
    if result.unexpected_keys or set(result.missing_keys) - {"lm_head.weight"}:
        raise RuntimeError(f"transformers' GPT-2 did not take our weights: {result}")
    theirs.tie_weights()
    theirs.generation_config.eos_token_id = None  # decode every asked token (random weights may emit GPT-2's eos)
    theirs.generation_config.pad_token_id = 0
    return theirs


def hf_worker(side: str, size: str, whats=("train", "decode"), seed: int = 0, ready=None) -> dict:
    """One side of the transformers comparison, in its own process: for each of ``whats``, "train" (forward,
    backward and a fused AdamW step on HF_SIZES' batch: median tokens/s of its ``steps`` after one warm-up step)
    or "decode" (cached greedy decoding at batch 1 from a random prompt: best tokens/s of its ``repeats`` after a
    short warm-up; the tokens come back to be compared). ``ready()`` is called before each timed part: the caller
    holds both sides there so that their timed parts run at once."""
    steps, repeats = HF_SIZES[size]["steps"], HF_SIZES[size]["repeats"]
    ours = gpt2_shaped(size, seed)
    model = ours if side == "tinygpt" else transformers_copy(ours)
    info = {"side": side, "size": size, "threads": torch.get_num_threads(),
            "params": sum(p.numel() for p in model.parameters())}
    if side == "transformers":
        import transformers

        info.update(transformers=transformers.__version__, attention=HF_ATTENTION)
    ready = ready or (lambda: None)
    return {what: {**info, "what": what, **(_hf_train(side, model, size, steps, seed, ready) if what == "train"
                                            else _hf_decode(side, model, size, repeats, seed, ready))}
            for what in whats}


def _hf_train(side: str, model, size: str, steps: int, seed: int, ready) -> dict:
    B, T = HF_SIZES[size]["batch"]
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), fused=True)
    vocab = HF_SIZES[size]["model"]["vocab_size"]
    data = torch.randint(0, vocab, (steps + 1, B, T + 1), generator=torch.Generator().manual_seed(seed))
    ready()
    times = []
    for i in range(steps + 1):
        x, y = data[i, :, :-1], data[i, :, 1:]
        t0 = time.perf_counter()
        if side == "tinygpt":
            loss = model(x, y)[1]
        else:  # labels = the inputs: transformers shifts them itself, as its users call it
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i:  # the first step warms up
            times.append(time.perf_counter() - t0)
    times.sort()
    opt.state.clear()
    return {"batch": [B, T], "steps": steps, "tokens_per_sec": B * T / times[len(times) // 2], "loss": loss.item()}


@torch.no_grad()
def _hf_decode(side: str, model, size: str, repeats: int, seed: int, ready) -> dict:
    from tinygpt.sampling.fast_linear import use_fast_decode
    from tinygpt.sampling.generate import generate

    spec = HF_SIZES[size]
    model.eval()
    prompt = torch.randint(0, spec["model"]["vocab_size"], (1, spec["prompt"]),
                           generator=torch.Generator().manual_seed(seed))
    if side == "tinygpt":
        use_fast_decode(model)  # as the sampling CLI does (it splits products only with 2 threads or more)

        def run(n):
            return generate(model, prompt, n, top_k=1)
    else:
        def run(n):
            return model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, do_sample=False,
                                  use_cache=True)
    run(4)  # warm-up
    ready()
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = run(spec["new_tokens"])
        best = min(best, time.perf_counter() - t0)
    return {"prompt": spec["prompt"], "new_tokens": spec["new_tokens"], "tokens_per_sec": spec["new_tokens"] / best,
            "tokens": out[0, spec["prompt"]:].tolist()}


def hf_worker_main(args_json: str) -> None:
    """``python -c`` entry of hf_worker (programs.hf_side_by_side): says "ready" on stdout and waits for a line
    on stdin before each timed part; the result is the last line of stdout, as JSON."""
    import json

    def ready():
        print("ready", flush=True)
        sys.stdin.readline()

    print(json.dumps(hf_worker(**json.loads(args_json), ready=ready)), flush=True)
