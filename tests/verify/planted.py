"""Attentions with known answers for tinygpt.verify's tests: a hand-written one from the formula (``Handmade``),
correct by default, with one planted bug per flag; the same as functions; and adapters that give torch's and
transformers' attentions the module interface (x (B, T, C) -> y, a (B, T) padding mask True = real)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, *, dim: int = -1, times: int = 1,
              prescale: bool = True) -> Tensor:
    """softmax(q k^T / sqrt(d) + mask) v; mask bool, True = may attend. ``dim=-2``: the softmax over the queries;
    ``times=2``: the scale applied twice; ``prescale=False``: q k^T computed before the scale (16-bit overflow)."""
    s = 1 / math.sqrt(q.shape[-1])
    scores = ((q * s) @ k.transpose(-2, -1) if prescale else (q @ k.transpose(-2, -1)) * s) * s ** (times - 1)
    scores = scores.masked_fill(~mask, float("-inf"))  # (B, H, T_q, T_k)
    none = ~mask.any(dim=dim, keepdim=True)  # rows (or columns) with no visible key
    w = torch.softmax(scores.masked_fill(none, 0.0), dim=dim).masked_fill(~mask, 0.0)
    return w @ v  # (B, H, T_q, D)


class Handmade(nn.Module):
    """Causal multi-head self-attention from the formula, with a KV cache (``step``) and a padding mask. Each flag
    plants one bug: ``softmax_dim=-2``, ``scale_twice``, ``hide_diagonal`` (query i sees keys j < i only: the mask
    off by one the other way), ``leak_after=32`` (queries from that position on see the next token),
    ``pad_queries_only`` (the padding mask applied to the queries' rows, not the keys), ``cache_top_left`` (the
    cached queries' triangle aligned top-left), ``nan_rows`` (no guard for rows with no visible key),
    ``late_scale`` (q k^T computed before its scale: in float16 it overflows first), ``train_leak`` (no mask on the
    training path), ``cache_window=N`` (the cache keeps only its last N keys), ``float32_fill`` (the mask added as a
    float32 tensor: a float16 copy fails with a dtype error)."""

    def __init__(self, n_embd: int = 32, n_head: int = 4, *, softmax_dim: int = -1, scale_twice: bool = False,
                 hide_diagonal: bool = False, leak_after: int | None = None, pad_queries_only: bool = False,
                 cache_top_left: bool = False, nan_rows: bool = False, late_scale: bool = False,
                 train_leak: bool = False, cache_window: int | None = None, float32_fill: bool = False):
        super().__init__()
        self.n_embd, self.n_head = n_embd, n_head
        self.qkv, self.proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.softmax_dim, self.scale_twice, self.hide_diagonal = softmax_dim, scale_twice, hide_diagonal
        self.leak_after, self.pad_queries_only, self.cache_top_left = leak_after, pad_queries_only, cache_top_left
        self.nan_rows, self.late_scale = nan_rows, late_scale
        self.train_leak, self.cache_window, self.float32_fill = train_leak, cache_window, float32_fill

    def mask(self, t_q: int, t_k: int, real: Tensor | None) -> Tensor:
        offset = 0 if self.cache_top_left else t_k - t_q
        i = torch.arange(t_q)[:, None] + offset  # (T_q, 1)
        j = torch.arange(t_k)[None, :]  # (1, T_k)
        keep = j < i if self.hide_diagonal else j <= i
        if self.leak_after is not None:
            keep = keep | ((i >= self.leak_after) & (j == i + 1))
        keep = keep[None, None]  # (1, 1, T_q, T_k)
        if real is not None:
            keep = keep & (real[:, None, -t_q:, None] if self.pad_queries_only else real[:, None, None, :])
        return keep

    def heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        B, T, C = x.shape
        return tuple(t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                     for t in self.qkv(x).split(C, dim=2))  # 3 x (B, H, T, D)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor | None) -> Tensor:
        keep = self.mask(q.shape[-2], k.shape[-2], real)
        if self.train_leak and self.training:
            keep = torch.ones_like(keep)
        if self.float32_fill:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            s = s + torch.zeros(keep.shape).masked_fill(~keep, -1e4)  # float32 whatever the model's dtype
            y = torch.softmax(s, dim=-1) @ v
        elif self.nan_rows:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            y = torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1) @ v
        else:
            y = attention(q, k, v, keep, dim=self.softmax_dim, times=2 if self.scale_twice else 1,
                          prescale=not self.late_scale)
        B, H, T, D = y.shape
        return self.proj(y.transpose(1, 2).reshape(B, T, H * D))  # (B, H, T, D) -> (B, T, C)

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        return self.attend(*self.heads(x), padding_mask)

    def step(self, x: Tensor, cache):
        """The next tokens after those cached: (y, cache), the cache holding every key and value so far."""
        q, k, v = self.heads(x)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)  # (B, H, T_k, D)
        y = self.attend(q, k, v, None)
        if self.cache_window:
            k, v = k[:, :, -self.cache_window :], v[:, :, -self.cache_window :]
        return y, (k, v)


class TorchMHA(nn.Module):
    """torch's nn.MultiheadAttention as a causal self-attention, its key_padding_mask as the padding mask."""

    def __init__(self, n_embd: int = 32, n_head: int = 4):
        super().__init__()
        self.embed_dim = n_embd
        self.mha = nn.MultiheadAttention(n_embd, n_head, batch_first=True)

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        hide = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)  # (T, T), True = may not attend
        pad = None if padding_mask is None else ~padding_mask
        return self.mha(x, x, x, attn_mask=hide, key_padding_mask=pad, need_weights=False)[0]


class HFGPT2Attention(nn.Module):
    """transformers' GPT2Attention with the causal mask GPT2Model gives it (transformers 5 builds the mask in the
    model and passes it down, additive: 0 where visible, the dtype's lowest value where not)."""

    def __init__(self, n_embd: int = 32, n_head: int = 4):
        from transformers import GPT2Config
        from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

        super().__init__()
        config = GPT2Config(n_embd=n_embd, n_head=n_head)
        config._attn_implementation = "eager"
        self.embed_dim = n_embd
        self.attn = GPT2Attention(config, layer_idx=0)

    def forward(self, x: Tensor) -> Tensor:
        T = x.shape[1]
        hidden = torch.ones(T, T, dtype=torch.bool).triu(1)  # (T, T)
        mask = torch.zeros(T, T, dtype=x.dtype).masked_fill(hidden, torch.finfo(x.dtype).min)[None, None]
        return self.attn(x, attention_mask=mask)[0]
