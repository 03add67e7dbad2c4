"""Sampling: the next-token distribution as a pure function, and the decode loop around a model.

``next_token_probs(logits, temperature, top_k)`` = softmax(logits / temperature) restricted to the top_k
largest logits (ties at the k-th value are kept). ``generate`` appends tokens one at a time, feeding the
model at most its last ``block_size`` tokens (its learned positions end there).

With ``use_cache=True`` (the default) the prompt is run once and each new token costs one position's
forward pass against the cached keys and values (kv_cache.KVCache). Policy beyond the context: learned
absolute positions cannot slide, so once the sequence is longer than ``block_size`` every step recomputes
the last ``block_size`` tokens, exactly as without the cache (the outputs stay identical).

Prompts of different lengths decode together as one left-padded batch (``pad_prompts`` builds it): pass its
``padding_mask`` and each row continues as it would alone (pads are never attended to; positions count real
tokens only).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinygpt.runtime.checks import is_int, is_number


def check_sampling(temperature: float, top_k: int | None) -> None:
    """One sentence for a bad temperature or top_k, before any work."""
    if not is_number(temperature) or not temperature > 0:
        raise ValueError(f"temperature={temperature!r} must be > 0 (use top_k=1 for greedy decoding).")
    if top_k is not None and (not is_int(top_k) or top_k < 1):
        raise ValueError(f"top_k={top_k!r} must be a positive integer or None (no cut).")


def next_token_probs(logits: Tensor, temperature: float = 1.0, top_k: int | None = None) -> Tensor:
    """logits (B, V) -> probabilities (B, V): softmax(logits / temperature) over the top_k largest logits."""
    check_sampling(temperature, top_k)
    if not torch.isfinite(logits).all():
        raise FloatingPointError("the model gives non-finite logits (it has diverged); nothing to sample.")
    logits = logits / temperature  # (B, V)
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k).values[:, [-1]]  # (B, 1): the k-th largest logit per row
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.softmax(logits, dim=-1)


def pad_prompts(prompts: list[list[int]], pad_id: int = 0, device=None) -> tuple[Tensor, Tensor]:
    """Token id lists of any lengths -> (idx (B, T_max), padding_mask (B, T_max)), left-padded with ``pad_id``
    (True = real token), T_max the longest prompt."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token.")
    longest = max(len(p) for p in prompts)
    idx = torch.full((len(prompts), longest), pad_id, dtype=torch.long, device=device)  # (B, T_max)
    mask = torch.zeros(len(prompts), longest, dtype=torch.bool, device=device)  # (B, T_max)
    for row, p in enumerate(prompts):
        idx[row, longest - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[row, longest - len(p):] = True
    return idx, mask


def check_left_padded(padding_mask: Tensor, idx: Tensor) -> None:
    """One sentence unless padding_mask is a bool (B, T) mask like idx whose rows are pads then real tokens."""
    if padding_mask.dtype != torch.bool or padding_mask.shape != idx.shape:
        raise ValueError(f"padding_mask must be bool with the prompts' shape {tuple(idx.shape)}, "
                         f"got {padding_mask.dtype} {tuple(padding_mask.shape)}.")
    if not bool(padding_mask[:, -1].all()) or bool((padding_mask[:, 1:] < padding_mask[:, :-1]).any()):
        raise ValueError("padding_mask must be left padding: in each row the pads (False) first, then the "
                         "prompt's tokens (True) up to the last position (tinygpt.model.generate.pad_prompts).")


@torch.no_grad()
def generate(
    model,
    idx: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    padding_mask: Tensor | None = None,
) -> Tensor:
    """Sample max_new_tokens after idx (B, T) from ``model`` (idx -> (logits, loss)); returns (B, T + new).
    ``padding_mask`` (B, T): left-padded prompts of different lengths (pad_prompts); the pads stay in front."""
    from tinygpt.model.kv_cache import KVCache

    block_size = model.config.block_size
    check_sampling(temperature, top_k)
    if padding_mask is not None:
        check_left_padded(padding_mask, idx)
    mask = padding_mask  # (B, T + generated so far), or None: every token real
    cache = KVCache.for_model(model, idx.shape[0]) if use_cache and model.config.attn.causal else None
    for _ in range(max_new_tokens):
        if cache is not None and idx.shape[1] <= block_size:
            new = idx[:, cache.pos:]  # (B, t): the prompt first, then one token per step
            pads = {} if mask is None else {"padding_mask": mask[:, cache.pos:]}  # (B, t)
            logits, _ = model(new, cache=cache, **pads)  # (B, t, V)
        else:  # no cache, a leaky model (no cache is valid) or past the context: recompute the window
            context = idx[:, -block_size:]  # (B, <=block_size)
            pads = {} if mask is None else {"padding_mask": mask[:, -block_size:]}  # (B, <=block_size)
            logits, _ = model(context, **pads)  # (B, t, V)
        probs = next_token_probs(logits[:, -1, :], temperature, top_k)  # (B, V): the last position predicts
        nxt = torch.multinomial(probs, num_samples=1, generator=generator)  # (B, 1)
        idx = torch.cat((idx, nxt), dim=1)  # (B, T + 1)
        if mask is not None:
            mask = torch.cat((mask, torch.ones_like(nxt, dtype=torch.bool)), dim=1)  # (B, T + 1)
    return idx
