"""A key/value cache for decoding: each layer's keys and values of the tokens seen so far.

Preallocated to ``max_len`` positions, (n_layer, B, H, max_len, D) each for keys and values (views of one
buffer ``kv``, each layer's keys next to its values), written in place: nothing is concatenated as the sequence
grows. A forward pass over T new tokens writes them at positions pos .. pos + T - 1 of every layer and returns
all pos + T keys and values to attend to; the attention then aligns the causal triangle bottom-right (query i
of the T new ones sees keys up to pos + i). The keys are kept as the scores see them: RoPE's rotated at their own
positions, so a new token is rotated at pos (the number of tokens cached), never at 0. With learned absolute
positions the cache cannot slide: it holds at most ``block_size`` tokens, and the decode loop falls back to
recomputing the window beyond that; so does every model unless ``model.extrapolate`` (RoPE, ALiBi, none), whose
cache the decode loop makes as long as the whole sequence.

A batch of prompts of different lengths is left-padded: the cache also keeps which of its positions hold a
real token (``mask``, (B, max_len)), so the pads are never attended to and each row's positions count its
real tokens only (GPT.forward's ``padding_mask``).
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int,
                 device=None, dtype=torch.float32):
        # keys and values of a layer side by side in one buffer, so that decoding writes both with one copy
        self.kv = torch.zeros((n_layer, 2, batch, n_head, max_len, head_dim), device=device, dtype=dtype)
        self.k, self.v = self.kv[:, 0], self.kv[:, 1]  # (L, B, H, max_len, D) each: views of kv
        self.mask = torch.ones(batch, max_len, dtype=torch.bool, device=device)  # (B, max_len): True = real token
        self.padded = False  # whether any cached position is a pad
        self.max_len, self.pos = max_len, 0

    @classmethod
    def for_model(cls, model, batch: int, max_len: int | None = None) -> KVCache:
        """A cache for ``model``'s layers and heads holding ``max_len`` positions (default: its block_size)."""
        c = model.config
        p = next(model.parameters())
        return cls(c.n_layer, batch, c.n_head, max_len or c.block_size, c.n_embd // c.n_head, device=p.device,
                   dtype=p.dtype)

    def layer(self, index: int) -> _LayerView:
        return _LayerView(self, index)

    def real_tokens(self) -> Tensor:
        """(B,): how many real (not pad) tokens each row has cached."""
        return self.mask[:, : self.pos].sum(dim=1)

    def end_after(self, n: int) -> int:
        """The position after ``n`` more tokens, or one sentence if the cache cannot hold them."""
        end = self.pos + n
        if end > self.max_len:
            raise ValueError(f"the KV cache holds {self.max_len} positions; {end} were asked for.")
        return end

    def extend_mask(self, new: Tensor) -> Tensor:
        """Record the padding mask (B, T) of the T tokens about to be cached; the mask of all keys (B, pos + T)."""
        end = self.end_after(new.shape[1])
        self.mask[:, self.pos:end] = new
        self.padded = self.padded or not bool(new.all())
        return self.mask[:, :end]

    def advance(self, n: int) -> None:
        """After every layer has written ``n`` new tokens."""
        self.pos += n

    def reset(self) -> None:
        self.pos, self.padded = 0, False
        self.mask.fill_(True)


class _LayerView:
    """One layer's slice of the cache, as the attention module sees it."""

    def __init__(self, cache: KVCache, index: int):
        self.cache, self.index = cache, index

    @property
    def cached(self) -> int:
        """Positions already in the cache (before this forward pass's tokens)."""
        return self.cache.pos

    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """k, v (B, H, T, D) of the new tokens -> keys and values of all tokens so far (B, H, pos + T, D)."""
        c = self.cache
        end = c.end_after(k.shape[-2])
        c.k[self.index, :, :, c.pos:end] = k
        c.v[self.index, :, :, c.pos:end] = v
        return c.k[self.index, :, :, :end], c.v[self.index, :, :, :end]  # (B, H, pos + T, D)
