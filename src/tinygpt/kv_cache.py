"""A key/value cache for decoding: each layer's keys and values of the tokens seen so far.

Preallocated to ``max_len`` positions, (n_layer, B, H, max_len, D) each for keys and values. A forward pass
over T new tokens writes them at positions pos .. pos + T - 1 of every layer and returns all pos + T keys
and values to attend to; the attention then aligns the causal triangle bottom-right (query i of the T new
ones sees keys up to pos + i). With learned absolute positions the cache cannot slide: it holds at most
``block_size`` tokens, and the decode loop falls back to recomputing the window beyond that.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int,
                 device=None, dtype=torch.float32):
        shape = (n_layer, batch, n_head, max_len, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)  # (L, B, H, max_len, D)
        self.v = torch.zeros(shape, device=device, dtype=dtype)  # (L, B, H, max_len, D)
        self.max_len, self.pos = max_len, 0

    @classmethod
    def for_model(cls, model, batch: int) -> KVCache:
        c = model.config
        p = next(model.parameters())
        return cls(c.n_layer, batch, c.n_head, c.block_size, c.n_embd // c.n_head, device=p.device, dtype=p.dtype)

    def layer(self, index: int) -> _LayerView:
        return _LayerView(self, index)

    def advance(self, n: int) -> None:
        """After every layer has written ``n`` new tokens."""
        self.pos += n

    def reset(self) -> None:
        self.pos = 0


class _LayerView:
    """One layer's slice of the cache, as the attention module sees it."""

    def __init__(self, cache: KVCache, index: int):
        self.cache, self.index = cache, index

    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """k, v (B, H, T, D) of the new tokens -> keys and values of all tokens so far (B, H, pos + T, D)."""
        c, T = self.cache, k.shape[-2]
        end = c.pos + T
        if end > c.max_len:
            raise ValueError(f"the KV cache holds {c.max_len} positions (model.block_size); {end} were asked for.")
        c.k[self.index, :, :, c.pos:end] = k
        c.v[self.index, :, :, c.pos:end] = v
        return c.k[self.index, :, :, :end], c.v[self.index, :, :, :end]  # (B, H, pos + T, D)
