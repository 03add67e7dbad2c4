"""Attention logits at initialisation: how their size depends on the head dim d_k and the scale.

Vaswani et al. (footnote 4): if q and k have independent components of mean 0 and variance 1, then q.k
has variance d_k, so the unscaled logits grow like sqrt(d_k) and 1/sqrt(d_k) keeps them at unit size.
``logits_at_init`` measures this on the first layer of a real GPT at init, for each head dim (at a fixed
width), scale option and W_Q/W_K init; ``stats.loglog_slope`` turns a column into the exponent:
under the unit-variance init, about 0.5 for scale none, 0 for sqrt_dk and -0.5 for inv_dk.
"""

from __future__ import annotations


import torch

from tinygpt.analysis.stats import loglog_slope
from tinygpt.model.attention import causal_mask
from tinygpt.model.config import scale_factor
from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.model.attention import normalised_entropy

SCALES = ("none", "sqrt_dk", "inv_dk")
INITS = ("gpt2", "unit")


def logits_at_init(
    n_embd: int = 256,
    head_dims: tuple[int, ...] = (8, 16, 32, 64, 128, 256),
    scales: tuple[str, ...] = SCALES,
    inits: tuple[str, ...] = INITS,
    block_size: int = 64,
    windows: int = 8,
    vocab_size: int = 65,
    seed: int = 0,
) -> list[dict]:
    """One row per (init, scale, d_k): the std of the pre-softmax logits over visible (causal) entries and
    the mean normalised attention entropy (1 = uniform), in layer 0 of a freshly initialised GPT on random
    tokens. The same weights (same seed) are used for every scale of one (init, d_k)."""
    rows = []
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, vocab_size, (windows, block_size), generator=gen)  # (N, T)
    visible = causal_mask(block_size, block_size)  # (T, T)
    for init in inits:
        for d_k in head_dims:
            if n_embd % d_k:
                raise ValueError(f"head dim {d_k} does not divide n_embd={n_embd}.")
            torch.manual_seed(seed)
            cfg = GPTConfig(vocab_size=vocab_size, block_size=block_size, n_layer=1, n_head=n_embd // d_k,
                            n_embd=n_embd, attn={"qk_init": init, "backend": "math"})
            model = GPT(cfg).eval()
            block = model.blocks[0]
            with torch.no_grad():
                h = block.ln_1(model.wte(idx) + model.wpe(torch.arange(block_size)))  # (N, T, C)
                q, k = block.attn.queries_keys(h)  # (N, H, T, d_k)
                raw = q @ k.transpose(-2, -1)  # (N, H, T, T), unscaled
            for scale in scales:
                s = raw * scale_factor(scale, d_k)
                w = torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1)  # (N, H, T, T)
                ent = normalised_entropy(w)  # (N, H, rows with a choice)
                rows.append({"init": init, "scale": scale, "d_k": d_k,
                             "logit_std": s[..., visible].std().item(), "entropy": ent.mean().item()})
    return rows


def slopes(rows: list[dict]) -> dict[tuple[str, str], float]:
    """(init, scale) -> log-log slope of the logit std against d_k."""
    out = {}
    for init in sorted({r["init"] for r in rows}):
        for scale in sorted({r["scale"] for r in rows}):
            sel = sorted((r["d_k"], r["logit_std"]) for r in rows if r["init"] == init and r["scale"] == scale)
            if len(sel) >= 2:
                out[(init, scale)] = loglog_slope(*zip(*sel, strict=True))
    return out
