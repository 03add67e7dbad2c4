"""Local copies of the patterns that `tinygpt-verify` was tried on in issue 56 (practitioners' attentions and the
bugs reproduced from public issue threads), each as small as the pattern allows, for known-answer tests: correct
ones must fail no check, bugged ones must fail the check that should catch them."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tests.verify.planted import Handmade, attention


# functions (q, k, v, mask) -> out, mask True = may attend

def llama_softmax(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """transformers' eager Llama: the dtype's lowest value as the fill, the softmax in float32, cast back."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype) @ v


def llama_idiom(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """LLaMA's reference code: softmax(scores.float()).type_as(q), rows with no visible key given zeros."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return (F.softmax(scores.float(), dim=-1).type_as(q) * mask) @ v


def scales_in_place(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """q.mul_(scale): the caller's q changed in place, the attention itself right."""
    q.mul_(1 / math.sqrt(q.shape[-1]))
    return attention(q * math.sqrt(q.shape[-1]), k, v, mask)


def fixed_scale(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """`/ 4.0`: 1/sqrt(d_k) only where d_k = 16."""
    return attention(q * math.sqrt(q.shape[-1]) / 4.0, k, v, mask)


def tiled(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, block: int = 64, rescale: bool = True) -> Tensor:
    """A flash-style attention over blocks of 64 keys with an online softmax; ``rescale=False`` forgets to rescale
    the running sums when a later block raises the running maximum (right within one block)."""
    scale = 1 / math.sqrt(q.shape[-1])
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)  # (B, H, T, 1) running max
    total = torch.zeros_like(m)  # running sum of exp
    acc = torch.zeros_like(q)  # (B, H, T, D)
    for start in range(0, k.shape[-2], block):
        kb, vb = k[..., start : start + block, :], v[..., start : start + block, :]
        s = ((q * scale) @ kb.transpose(-2, -1)).masked_fill(~mask[..., start : start + block], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = m_new.masked_fill(m_new == float("-inf"), 0.0)
        p = torch.exp(s - safe)
        factor = torch.exp(m - safe) if rescale else torch.ones_like(m)
        total = total * factor + p.sum(-1, keepdim=True)
        acc = acc * factor + p @ vb
        m = m_new
    return acc / total.clamp_min(1e-300)


def sliding_window(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, w: int = 4) -> Tensor:
    """Each query sees its last ``w`` keys (itself included), within the mask given."""
    t = q.shape[-2]
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    return attention(q, k, v, mask & (i - j < w))


def soft_capped(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, cap: float = 50.0) -> Tensor:
    """Gemma 2's soft cap: cap * tanh(scores / cap) before the softmax."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = (cap * torch.tanh(scores / cap)).masked_fill(~mask, float("-inf"))
    scores = scores.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return torch.softmax(scores, -1).masked_fill(~mask, 0.0) @ v


def assumes_causal(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """Right under the causal mask and under none; any other mask read as causal (is_causal for any mask)."""
    if mask.all():
        return attention(q, k, v, mask)
    t = q.shape[-2]
    return attention(q, k, v, torch.ones(t, t, dtype=torch.bool).tril())


def mixes_next_sequence(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """Each sequence of the batch gets a share of the one before it (a cumulative op over the wrong dimension)."""
    out = attention(q, k, v, mask)
    return torch.cat([out[:1], out[1:] + 0.5 * out[:-1]])


# modules x (B, T, C) -> y

class PositionInPlace(Handmade):
    """A learned position added in place to the module's input (x += pos): the caller's x changes, the attention
    is right."""

    def __init__(self, n_embd: int = 32, n_head: int = 4, max_len: int = 512):
        super().__init__(n_embd, n_head)
        self.pos = nn.Parameter(torch.randn(max_len, n_embd) * 0.1)

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        x += self.pos[: x.shape[1]]
        return super().forward(x, padding_mask)


class Float32Softmax(Handmade):
    """x-transformers' non-flash attention: the fill is the scores' dtype's lowest value, the softmax runs in
    float32 and is cast back (a float64 copy's fill becomes -inf in float32: NaN for a row with no visible key)."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor | None) -> Tensor:
        keep = self.mask(q.shape[-2], k.shape[-2], real)
        sim = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        sim = sim.masked_fill(~keep, -torch.finfo(sim.dtype).max)
        y = F.softmax(sim, dim=-1, dtype=torch.float32).type(sim.dtype) @ v
        B, H, T, D = y.shape
        return self.proj(y.transpose(1, 2).reshape(B, T, H * D))


class DropoutInEval(Handmade):
    """nanoGPT#240: dropout_p passed to scaled_dot_product_attention whatever self.training: random in eval."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor | None) -> Tensor:
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask(q.shape[-2], k.shape[-2], real),
                                           dropout_p=0.1)
        B, H, T, D = y.shape
        return self.proj(y.transpose(1, 2).reshape(B, T, H * D))


class LeaksIn16Bit(Handmade):
    """Right in float32 and float64; in float16 and bfloat16 the mask is one off (a half-precision path of its
    own)."""

    def mask(self, t_q: int, t_k: int, real: Tensor | None) -> Tensor:
        keep = super().mask(t_q, t_k, real)
        if self.qkv.weight.dtype in (torch.float16, torch.bfloat16):
            keep = keep | torch.ones(t_q, t_k, dtype=torch.bool).triu(1).tril(1)
        return keep


class LeaksAtLength(Handmade):
    """Leaks (position 0 sees position 1) at the lengths ``leaks(T)`` says only: a chunked attention whose last
    chunk is handled apart."""

    def __init__(self, n_embd: int = 32, n_head: int = 4, leaks=lambda t: False):
        super().__init__(n_embd, n_head)
        self.leaks = leaks

    def mask(self, t_q: int, t_k: int, real: Tensor | None) -> Tensor:
        keep = super().mask(t_q, t_k, real)
        if t_q == t_k and self.leaks(t_q):
            keep = keep.clone()
            keep[..., 0, 1] = True
        return keep


class MixesNextSequence(Handmade):
    """Each sequence's output gets a share of the one before it in the batch."""

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        y = super().forward(x, padding_mask)
        return torch.cat([y[:1], y[1:] + 0.5 * y[:-1]])


class SquareMaskCache(Handmade):
    """meta-llama/llama#899: a multi-token step builds its mask as a (T_new, T_new) triangle, as if nothing were
    cached (right for the prefill and for one token at a time)."""

    def step(self, x: Tensor, cache):
        q, k, v = self.heads(x)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        t = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        if t > 1:
            scores = scores + torch.full((t, t), float("-inf"), dtype=q.dtype).triu(1)  # (T_new, T_new)
        y = torch.softmax(scores, -1) @ v
        B, H, T, D = y.shape
        return self.proj(y.transpose(1, 2).reshape(B, T, H * D)), (k, v)


class CausalFlagCache(Handmade):
    """pytorch/executorch#21749: is_causal=True whenever more than one token is new (the one-token fix of
    pytorch/pytorch#144858 kept): with a cache, the triangle is aligned top-left."""

    def step(self, x: Tensor, cache):
        q, k, v = self.heads(x)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[-2] > 1)
        B, H, T, D = y.shape
        return self.proj(y.transpose(1, 2).reshape(B, T, H * D)), (k, v)


class PadTrue(Handmade):
    """A padding mask read as torch's key_padding_mask reads it: True = padding."""

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        return super().forward(x, None if padding_mask is None else ~padding_mask)
