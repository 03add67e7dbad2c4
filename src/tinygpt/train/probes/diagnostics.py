"""What a loss curve does not show: honest loss, leaks from the future, and what attention looks like.

- ``honest_loss``: each position scored from its prefix alone (the model is run on x[:t+1]
  and only the last position is scored). Equals the teacher-forced loss for a causal model; for a
  model that can see the future it is the honest loss.
- ``loss_by_position``: the teacher-forced loss at each position t of the window. A model that reads
  its target from the input has ~0 everywhere except the last position, whose target lies outside.
- ``future_leak``: max |change in logits at positions <= t| when the tokens after t are replaced.
  Exactly 0 for a correct causal model.
- ``window_losses``: the teacher-forced loss of every window at every position (what reports bootstrap over).
- ``count_baselines``: the unigram and bigram count models' loss on the same windows (what "trained" means).
- ``attention_stats``: mean attention entropy (model.attention.normalised_entropy: each query row divided by
  log(number of visible keys): 1 = uniform, 0 = one-hot) and the largest pre-softmax logit, on a probe batch,
  through the math path; and the mask margin, the largest (future score - largest past score) of any row: how far
  a finite mask fill added to the scores must reach to keep the future out (-inf always does).
"""

from __future__ import annotations

import math

from contextlib import contextmanager, nullcontext

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from tinygpt.model.attention import causal_mask, normalised_entropy
from tinygpt.model.kv_cache import KVCache
from tinygpt.model.gpt import GPT


@contextmanager
def evaluating(model: torch.nn.Module):
    """Eval mode and no grad inside; the previous mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def honest_losses(model: GPT, x: Tensor, y: Tensor, positions: list[int] | None = None) -> Tensor:
    """Cross-entropy of y[n, t] given x[n, :t+1] only, per window n and each t in ``positions`` (default: all
    T). x, y: (N, T). Returns a float64 (N, len(positions)) tensor on the CPU.

    A causal model is decoded with the KV cache, one token per step (T one-token passes instead of T
    passes over growing prefixes; the same numbers: a token's keys and values never depend on later ones).
    A model without the mask has no valid cache: each scored position reruns its prefix."""
    N, T = x.shape
    positions = list(range(T)) if positions is None else list(positions)
    losses = torch.empty(N, len(positions), dtype=torch.float64)
    with evaluating(model):
        if model.config.attn.causal:
            cache = KVCache.for_model(model, N)
            where = {t: i for i, t in enumerate(positions)}
            for t in range(max(positions) + 1):
                logits, _ = model(x[:, t : t + 1], cache=cache)  # (N, 1, V): position t from its prefix
                if t in where:
                    losses[:, where[t]] = F.cross_entropy(logits[:, -1].double(), y[:, t], reduction="none").cpu()
        else:
            for i, t in enumerate(positions):
                logits, _ = model(x[:, : t + 1])  # (N, t+1, V): only the last position is scored
                losses[:, i] = F.cross_entropy(logits[:, -1].double(), y[:, t], reduction="none").cpu()
    return losses


def honest_loss_by_position(model: GPT, x: Tensor, y: Tensor, positions: list[int] | None = None) -> Tensor:
    """Mean cross-entropy of y[:, t] given x[:, :t+1] only, for each t in ``positions`` (default: all T).
    x, y: (N, T). Returns a float64 tensor of len(positions): ``honest_losses`` averaged over windows."""
    return honest_losses(model, x, y, positions).mean(0)


def honest_loss(model: GPT, x: Tensor, y: Tensor, positions: list[int] | None = None) -> float:
    """Mean cross-entropy of y[:, t] given x[:, :t+1] only, over t in ``positions`` (default: all). x, y: (N, T)."""
    return honest_loss_by_position(model, x, y, positions).mean().item()


def honest_and_teacher_forced(model: GPT, x: Tensor, y: Tensor, positions: list[int]) -> tuple[Tensor, Tensor]:
    """The autoregressive and the teacher-forced loss of each window at ``positions``: two float64 (N, P) tensors on
    the CPU, x, y: (N, T). Their difference per window is what the leak alarm tests (0 to rounding if causal)."""
    ar = honest_losses(model, x, y, positions)  # (N, P)
    tf = window_losses(model, x, y, batch_size=len(x))[:, positions]  # (N, T) -> (N, P)
    return ar, tf


def spread_positions(T: int, n: int) -> list[int]:
    """n positions spread evenly over 0..T-1, always including the first and the last (all if n >= T)."""
    if n >= T:
        return list(range(T))
    return sorted({round(i * (T - 1) / (n - 1)) for i in range(n)}) if n > 1 else [T - 1]


def position_losses(logits: Tensor, y: Tensor) -> Tensor:
    """(b, T) float64: the cross-entropy of each target y (b, T) under logits (b, T, V), on their device."""
    ce = F.cross_entropy(logits.double().flatten(0, 1), y.flatten(), reduction="none")  # (b*T,)
    return ce.view(y.shape)  # (b*T,) -> (b, T)


def window_losses(model: GPT, x: Tensor, y: Tensor, batch_size: int = 64, progress=None) -> Tensor:
    """(N, T) float64 teacher-forced cross-entropy of every window n at every position t, on the CPU; x, y: (N, T),
    scored ``batch_size`` windows at a time (``progress``, if given, is called with the windows done after each).
    Its mean is the teacher-forced loss on these windows."""
    N, T = x.shape
    out = torch.empty(N, T, dtype=torch.float64)
    with evaluating(model):
        for i in range(0, N, batch_size):
            logits, _ = model(x[i : i + batch_size])  # (b, T, V)
            out[i : i + batch_size] = position_losses(logits, y[i : i + batch_size]).cpu()  # (b, T)
            if progress is not None:
                progress(min(i + batch_size, N))
    return out


def loss_by_position(model: GPT, x: Tensor, y: Tensor) -> Tensor:
    """(T,) teacher-forced cross-entropy at each position, averaged over the N windows. x, y: (N, T)."""
    return window_losses(model, x, y, batch_size=len(x)).mean(0)  # (N, T) -> (T,)


def count_baselines(train_ids, x: Tensor, y: Tensor, vocab_size: int) -> dict[str, float]:
    """The loss of two count models fitted on the training ids, on the targets y of windows x, y (N, T):
    unigram (each token's frequency) and bigram (the next token's frequency given the current one), both with
    add-one smoothing. A model that does not beat the unigram baseline has learned only character frequencies.

    The bigram table is never built (GPT-2's 50257 tokens would make it 20 GB): the training pairs, each as one
    code, are sorted in place, and a window's pair count is how many codes equal its own (two binary searches), so
    its probability (count + 1) / (row count + V) is the table's, to the last bit. Nothing else as large as the
    training ids is allocated (torch.unique's sort and counts were the default run's peak memory)."""
    ids = torch.from_numpy(np.array(train_ids, dtype=np.int64))  # a copy: the cache is a read-only memmap
    uni = torch.bincount(ids, minlength=vocab_size).double() + 1  # (V,)
    x, y = x.cpu().long(), y.cpu().long()
    unigram = -(uni / uni.sum()).log()[y]  # (N, T)
    codes = (ids[:-1] * vocab_size).add_(ids[1:]).numpy()  # (P,): each training pair as one code
    codes.sort()  # in place
    query = (x * vocab_size + y).numpy()  # (N, T): row = current token, column = next
    count = np.searchsorted(codes, query, side="right") - np.searchsorted(codes, query, side="left")  # (N, T)
    pair = torch.from_numpy(count).double() + 1  # (N, T): the pair's count, add-one
    rows = torch.bincount(ids[:-1], minlength=vocab_size).double() + vocab_size  # (V,): each row's total, add-one
    bigram = -(pair / rows[x]).log()  # (N, T)
    return {"unigram_loss": unigram.mean().item(), "bigram_loss": bigram.mean().item()}


def teacher_forced_loss(model: GPT, x: Tensor, y: Tensor) -> float:
    with evaluating(model):
        return model(x, y)[1].item()


def future_leak(model: GPT, x: Tensor, positions: list[int] | None = None, seed: int = 0) -> float:
    """max |logits(x)[:, :t+1] - logits(x')[:, :t+1]| where x' replaces the tokens after t at random."""
    N, T = x.shape
    positions = positions if positions is not None else sorted({0, T // 4, T // 2, 3 * T // 4, T - 2})
    gen = torch.Generator(device="cpu").manual_seed(seed)
    worst = 0.0
    with evaluating(model):
        base, _ = model(x)  # (N, T, V)
        for t in positions:
            if not 0 <= t < T - 1:
                continue
            x2 = x.clone()
            x2[:, t + 1 :] = torch.randint(0, model.config.vocab_size, (N, T - t - 1), generator=gen).to(x.device)
            other, _ = model(x2)
            change = (base[:, : t + 1] - other[:, : t + 1]).abs().max().item()
            if change != change:  # NaN: a diverged model; no leak can be measured
                return float("nan")
            worst = max(worst, change)
    return worst


def attention_stats(model: GPT, x: Tensor) -> dict[str, float | list[float]]:
    """On x (N, T), per layer and overall: normalised attention entropy (mean and min over rows), the max
    pre-softmax logit, the attention mass on future keys (the weight a query row i puts on keys j > i,
    averaged over heads and rows, and its largest over rows and heads; exactly 0 under the causal mask), and the
    RMS of q and k."""
    with evaluating(model):
        probes = model.dissect_attention(x)  # per layer: weights, logits (N, H, T, T); q, k (N, H, T, D)
    return stats_of_layers(probes, model.config.attn.causal)


def stats_of_layers(probes: list[dict[str, Tensor]], causal: bool) -> dict[str, float | list[float]]:
    """attention_stats from each layer's weights, logits (N, H, T, T), q and k (N, H, T, D), however computed
    (GPT.dissect_attention, or the forward softmax_gradients keeps)."""
    T, device = probes[0]["weights"].shape[-1], probes[0]["weights"].device
    maps = [p["weights"] for p in probes]
    logits = [p["logits"] for p in probes]
    qk = [(p["q"], p["k"]) for p in probes]
    visible = causal_mask(T, T, device) if causal else torch.ones(T, T, dtype=torch.bool, device=device)
    future = torch.ones(T, T, dtype=torch.bool, device=device).triu(1)  # (T, T): key j > query i
    past = causal_mask(T, T, device)  # (T, T): what a causal mask leaves visible, for the margin
    has_future = ~past.all(-1)  # (T,): every row but the last has a masked key
    layers: dict[str, list[float]] = {k: [] for k in ("entropy", "entropy_min", "max_logit", "future_mass",
                                                       "future_mass_max", "mask_margin", "visible_floor", "q_rms",
                                                       "k_rms")}
    for w, s, (q, k) in zip(maps, logits, qk, strict=True):
        h = normalised_entropy(w, causal)  # (N, H, rows with a choice)
        layers["entropy"].append(h.mean().item())
        layers["entropy_min"].append(h.min().item())
        layers["max_logit"].append(s.masked_fill(~visible, float("-inf")).max().item())
        on_future = (w * future).sum(-1)  # (N, H, T): each row's weight on its future keys
        layers["future_mass"].append(on_future.mean().item())
        layers["future_mass_max"].append(on_future.max().item())  # the most any one row puts there
        masked_max = s.masked_fill(past, float("-inf")).amax(-1)  # (N, H, T): the largest future score per row
        visible_max = s.masked_fill(~past, float("-inf")).amax(-1)  # (N, H, T): the largest past score
        layers["mask_margin"].append((masked_max - visible_max)[..., has_future].max().item())
        layers["visible_floor"].append(visible_max[..., has_future].min().item())  # what a replacing fill must beat
        layers["q_rms"].append(q.pow(2).mean().sqrt().item())
        layers["k_rms"].append(k.pow(2).mean().sqrt().item())
    out = {
        "attn_entropy": sum(layers["entropy"]) / len(layers["entropy"]),
        "attn_entropy_min": min(layers["entropy_min"]),
        "attn_max_logit": max(layers["max_logit"]),
        "attn_future_mass": sum(layers["future_mass"]) / len(layers["future_mass"]),
        "attn_future_mass_max": max(layers["future_mass_max"]),
        "attn_mask_margin": max(layers["mask_margin"]),
        "attn_visible_floor": min(layers["visible_floor"]),
    }
    out.update({f"attn_{k}_per_layer": v for k, v in layers.items()})
    return out


@contextmanager
def keeping_attention(model: GPT):
    """Each layer's attention keeps its q, k, scores and weights (in the autograd graph) while inside: the list of
    every layer's list, [] for a layer whose attention does not keep them (a replaced one)."""
    layers = [block.attn for block in model.blocks]
    kept = [[] for _ in layers]
    for attn, mine in zip(layers, kept, strict=True):
        if hasattr(attn, "keep"):
            attn.keep = mine
    try:
        yield kept
    finally:
        for attn in layers:
            if hasattr(attn, "keep"):
                attn.keep = None


def visible_pairs(model: GPT, T: int, device) -> Tensor:
    """(T, T) bool: the (query, key) pairs the model's attention sees (the causal lower triangle, or every pair)."""
    return causal_mask(T, T, device) if model.config.attn.causal else torch.ones(T, T, dtype=torch.bool,
                                                                                   device=device)


MECHANISM = ("softmax_gain", "jacobian_trace", "grad_wq", "grad_wk", "raw_qk", "scaled_qk", "scores_inf")


def softmax_gradients(model: GPT, x: Tensor, y: Tensor, autocast=nullcontext,
                      layers_out: list | None = None) -> dict[str, list[float]]:
    """What Vaswani et al.'s argument for 1/sqrt(d_k) is about, per layer, on windows x, y (N, T), in eval mode and
    in the precision training uses (``autocast``: the trainer's forward context):

    - ``softmax_gain``: ||dL/dS|| / ||dL/dP|| over the visible scores S and weights P: how much of the gradient that
      reaches the attention weights passes through the softmax to the scores (0 for a saturated, one-hot softmax);
    - ``jacobian_trace``: the mean over query rows of the softmax Jacobian's trace, sum_j p_j (1 - p_j) = 1 - sum_j
      p_j^2, over its value for uniform weights, 1 - 1/n (n visible keys): 1 uniform, 0 one-hot; label-free;
    - ``grad_wq``, ``grad_wk``: the norms of dL/dW_Q and dL/dW_K (the query and key rows of c_attn's weight);
    - ``raw_qk``, ``scaled_qk``: the largest |q.k| over visible pairs before the scale (computed in the forward's
      dtype: inf where float16 overflows) and the largest |score| as the forward computed it (inf likewise);
      ``scores_inf``: 1.0 when a visible score is not finite, else 0.0.

    Nothing is changed: no parameter's .grad is touched (torch.autograd.grad), the mode is restored. ``layers_out``:
    a list that gets each layer's weights, logits (the scores before the mask), q and k of that forward, detached
    (what stats_of_layers reads: the stability probe's attention statistics without a forward of their own)."""
    N, T = x.shape
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad(), keeping_attention(model) as kept, autocast():
            _, loss = model(x, y)
    finally:
        model.train(was_training)
    layers = [k[0] for k in kept if k]  # the first forward of each layer that kept its tensors
    if layers_out is not None:
        layers_out.extend({"weights": k["weights"].detach(), "logits": k["scores"].detach(), "q": k["q"].detach(),
                           "k": k["k"].detach()} for k in layers)
    visible = visible_pairs(model, T, x.device)  # (T, T)
    out: dict[str, list[float]] = {name: [] for name in MECHANISM}
    if not layers:
        return out
    weights = [block.attn.c_attn.weight for block, k in zip(model.blocks, kept, strict=True) if k]
    grads = torch.autograd.grad(loss, [*(k["scores"] for k in layers), *(k["weights"] for k in layers), *weights],
                                allow_unused=True)
    n = len(layers)
    C = model.config.n_embd
    seen = visible.sum(-1)  # (T,): keys each query row sees
    choice = seen > 1
    for i, k in enumerate(layers):
        d_s, d_p, d_w = grads[i], grads[n + i], grads[2 * n + i]
        d_s = torch.zeros_like(k["scores"]) if d_s is None else d_s
        d_p = torch.zeros_like(k["weights"]) if d_p is None else d_p
        gain_num = d_s.double().masked_fill(~visible, 0.0).norm()  # float64: a float16 gradient's norm can overflow
        gain_den = d_p.double().masked_fill(~visible, 0.0).norm()
        out["softmax_gain"].append((gain_num / gain_den).item() if gain_den > 0 else float("nan"))
        p = k["weights"].detach().float()  # (N, H, T, T)
        trace = (1 - p.pow(2).sum(-1))[..., choice] / (1 - 1 / seen[choice].float())  # (N, H, rows with a choice)
        out["jacobian_trace"].append(trace.mean().item())
        d_w = torch.zeros_like(weights[i]) if d_w is None else d_w.double()
        out["grad_wq"].append(d_w[:C].norm().item())
        out["grad_wk"].append(d_w[C:2 * C].norm().item())
        q, kk = k["q"].detach(), k["k"].detach()
        raw = (q @ kk.transpose(-2, -1)).abs().masked_fill(~visible, 0.0)  # (N, H, T, T), the forward's dtype
        scores = k["scores"].detach()
        out["raw_qk"].append(raw.max().float().item())
        out["scaled_qk"].append(scores.abs().masked_fill(~visible, 0.0).max().float().item())
        out["scores_inf"].append(float(not torch.isfinite(scores.masked_fill(~visible, 0.0)).all()))
    return out


def batch_qk(model: GPT, x: Tensor) -> tuple[float, float, float, float]:
    """The largest q.k over the visible pairs of any layer on inputs x (N, T), in float32 from the weights as they are
    (autocast off, eval mode, no gradient): before the scale (``raw``) and after it (``scaled``, the scores the mask
    and softmax get), each as the largest |q.k| and as the largest signed value (the most positive). A float16 forward
    of the same inputs overflows where the product it forms passes 65,504: the raw one when the scale comes after the
    product, the scaled one when it is folded into q and k. Only a positive overflow (+inf) on a visible pair makes
    the softmax NaN: a -inf score gets weight 0, as a masked one does. Returns (raw, scaled, raw_pos, scaled_pos)."""
    T = x.shape[1]
    visible = visible_pairs(model, T, x.device)  # (T, T)
    was_training = model.training
    model.eval()
    raw = scaled = 0.0
    raw_pos = scaled_pos = -math.inf
    try:
        with torch.no_grad(), keeping_attention(model) as kept, torch.autocast(x.device.type, enabled=False):
            model(x)
            for k in (k[0] for k in kept if k):  # inside: a surrounding autocast would make the product float16
                qk = k["q"].float() @ k["k"].float().transpose(-2, -1)  # (N, H, T, T): before the scale
                sc = k["scores"].float()  # (N, H, T, T): after it
                raw = max(raw, qk.abs().masked_fill(~visible, 0.0).max().item())
                scaled = max(scaled, sc.abs().masked_fill(~visible, 0.0).max().item())
                raw_pos = max(raw_pos, qk.masked_fill(~visible, -math.inf).max().item())
                scaled_pos = max(scaled_pos, sc.masked_fill(~visible, -math.inf).max().item())
    finally:
        model.train(was_training)
    return raw, scaled, raw_pos, scaled_pos


ARRAYS = "arrays"  # run_all's key for per-window arrays: saved to diagnostics.npz, not to summary.json
LEAKY_AR_POSITIONS = 64  # a model without the mask reruns a prefix per scored position: at most this many


def run_all(model: GPT, x: Tensor, y: Tensor) -> dict:
    """All diagnostics on a fixed batch of validation windows x, y (N, T). The autoregressive loss scores
    every position of a causal model (KV-cache decoding); for a model without the mask it scores at most
    LEAKY_AR_POSITIONS positions spread over the window (first and last included), and says how many."""
    T = x.shape[1]
    positions = None if model.config.attn.causal else spread_positions(T, LEAKY_AR_POSITIONS)
    ar_windows = honest_losses(model, x, y, positions)  # (N, T) or (N, len(positions))
    ar = ar_windows.mean(0)  # (T,) or (len(positions),)
    tf = loss_by_position(model, x, y)  # (T,): its mean is the teacher-forced loss (every position has N windows)
    out = {
        "val_loss_honest": ar.mean().item(),
        "honest_positions": len(ar),  # scored positions per window
        "honest_at": list(range(T)) if positions is None else positions,  # which ones
        "val_loss_probe": tf.mean().item(),  # teacher-forced, same windows: equal if causal
        "future_leak": future_leak(model, x),
        "loss_by_position": tf.tolist(),
        "loss_by_position_honest": ar.tolist(),  # at the scored positions
        ARRAYS: {"honest_window_position": ar_windows.float().numpy()},  # per window: for diagnostics.npz
    }
    out.update(attention_stats(model, x))
    return out
