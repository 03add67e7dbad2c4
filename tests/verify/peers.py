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


class QKNorm(Handmade):
    """x-transformers' qk_norm: q and k l2-normalised per head, the scores times a fixed scale (10) instead of
    1/sqrt(d_k): bounded whatever the input's size."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor | None) -> Tensor:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        return super().attend(q * 10 * math.sqrt(q.shape[-1]), k, v, real)  # attention() divides by sqrt(d)


class SoftClamp(Handmade):
    """x-transformers' softclamp_logits (Gemma 2's soft cap): scores 50 * tanh(scores / 50) before the mask."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor | None) -> Tensor:
        keep = self.mask(q.shape[-2], k.shape[-2], real)
        sim = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, T_q, T_k)
        sim = (50 * torch.tanh(sim / 50)).masked_fill(~keep, float("-inf"))
        y = torch.softmax(sim, dim=-1) @ v
        B, H, T, D = y.shape
        return self.proj(y.transpose(1, 2).reshape(B, T, H * D))


class NullKey(Handmade):
    """Strictly causal with a learned null key: query i sees keys j < i and a learned key and value of its own
    (x-transformers' num_mem_kv, attention sinks): never its own key, and the first query sees the null key only."""

    def __init__(self, n_embd: int = 32, n_head: int = 4):
        super().__init__(n_embd, n_head)
        self.null = nn.Parameter(torch.randn(2, n_head, 1, n_embd // n_head))  # (k/v, H, 1, D)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor | None) -> Tensor:
        B, t_q, t_k = q.shape[0], q.shape[-2], k.shape[-2]
        null_k, null_v = (n.expand(B, -1, -1, -1).to(q.dtype) for n in self.null)  # 2 x (B, H, 1, D)
        i = torch.arange(t_q)[:, None] + t_k - t_q
        keep = torch.arange(t_k)[None, :] < i  # (T_q, T_k): the keys before the query, not its own
        keep = torch.cat([torch.ones(t_q, 1, dtype=torch.bool), keep], dim=1)  # (T_q, 1 + T_k)
        y = attention(q, torch.cat([null_k, k], 2), torch.cat([null_v, v], 2), keep)
        return self.proj(y.transpose(1, 2).reshape(B, t_q, self.n_embd))  # (B, H, T, D) -> (B, T, C)


class Alibi(Handmade):
    """ALiBi (Press et al.): no position embedding, -slope_h * distance added to head h's scores, slopes
    2^(-8 (h + 1) / H); ``sign=-1`` plants the slip of slopes of the wrong sign (farther keys favoured)."""

    def __init__(self, n_embd: int = 32, n_head: int = 4, sign: float = 1.0):
        super().__init__(n_embd, n_head)
        self.slopes = sign * 2.0 ** (-8.0 * torch.arange(1, n_head + 1) / n_head)  # (H,)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor | None) -> Tensor:
        t_q, t_k = q.shape[-2], k.shape[-2]
        distance = (torch.arange(t_q)[:, None] + t_k - t_q - torch.arange(t_k)[None, :]).clamp_min(0)  # (T_q, T_k)
        bias = -self.slopes[:, None, None] * distance  # (H, T_q, T_k)
        keep = self.mask(t_q, t_k, real)
        sim = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1]) + bias.to(q.dtype)
        y = torch.softmax(sim.masked_fill(~keep, float("-inf")), dim=-1) @ v
        B, H, T, D = y.shape
        return self.proj(y.transpose(1, 2).reshape(B, T, H * D))


class SlidingWindow(Handmade):
    """Each query sees its last ``w`` keys, itself included (Hugging Face's sliding_window = w); ``slip=True``: w + 1
    keys, flash-attn's window_size=(w, 0) given Hugging Face's w (transformers#39408)."""

    def __init__(self, n_embd: int = 32, n_head: int = 4, w: int = 4, slip: bool = False):
        super().__init__(n_embd, n_head)
        self.w, self.slip = w, slip

    def mask(self, t_q: int, t_k: int, real: Tensor | None) -> Tensor:
        i = torch.arange(t_q)[:, None] + t_k - t_q  # (T_q, 1)
        far = i - torch.arange(t_k)[None, :]  # (T_q, T_k): how far back each key is
        return super().mask(t_q, t_k, real) & (far <= self.w if self.slip else far < self.w)


class LocalMHA(nn.Module):
    """local-attention 1.11.2's LocalMHA (causal), its pattern kept and its blocked computation written as the mask
    it amounts to: query i sees keys i - W .. i with ``exact_windowsize`` (W + 1 keys), else the keys from the start
    of the block of W before its own; rotary positions as its SinusoidalEmbeddings (relative, so absolute positions
    give the blocked path's scores). Its cache step is the package's, bugs included: the keys it returns as the
    cache are the rotated ones (each later step rotates them again), the keys kept are cut at -(W + len % W) for a
    non-exact window, and with ``qk_rmsnorm`` (scale 8) the step scales q by 1/sqrt(d) instead. ``step`` adapts
    its one-token cache to the verifier's step(x_new, cache)."""

    def __init__(self, n_embd: int = 32, n_head: int = 4, window: int = 4, exact_windowsize: bool = True,
                 rotary: bool = True, qk_rmsnorm: bool = False):
        super().__init__()
        self.n_embd, self.heads, self.w = n_embd, n_head, window
        self.exact, self.rotary, self.qk_rmsnorm = exact_windowsize, rotary, qk_rmsnorm
        self.to_qkv, self.to_out = nn.Linear(n_embd, 3 * n_embd, bias=False), nn.Linear(n_embd, n_embd, bias=False)
        self.scale = 8.0 if qk_rmsnorm else None  # LocalAttention(scale=qk_scale if qk_rmsnorm else None)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in self.to_qkv(x).chunk(3, dim=-1))  # 3 x (B, H, T, D)
        if self.qk_rmsnorm:  # the learned q_scale and k_scale start at ones
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        return q, k, v

    @staticmethod
    def rotate(x: Tensor, positions: Tensor) -> Tensor:
        """SinusoidalEmbeddings and apply_rotary_pos_emb: x (B, H, N, D) rotated at ``positions`` (N,)."""
        d = x.shape[-1]
        freqs = positions[:, None].to(x.dtype) / 10000 ** (torch.arange(0, d, 2, dtype=x.dtype) / d)  # (N, D/2)
        freqs = torch.cat((freqs, freqs), dim=-1)  # (N, D)
        x1, x2 = x.chunk(2, dim=-1)
        return x * freqs.cos() + torch.cat((-x2, x1), dim=-1) * freqs.sin()

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.project(x)
        t = x.shape[1]
        if self.rotary:
            q, k = self.rotate(q, torch.arange(t)), self.rotate(k, torch.arange(t))
        i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        keep = (j <= i) & ((i - j <= self.w) if self.exact else (j >= (i // self.w - 1) * self.w))  # (T, T)
        scale = self.scale or q.shape[-1] ** -0.5
        sim = ((q * scale) @ k.transpose(-2, -1)).masked_fill(~keep, -torch.finfo(q.dtype).max)
        return self.out(torch.softmax(sim, dim=-1) @ v)

    def out(self, y: Tensor) -> Tensor:
        B, H, T, D = y.shape
        return self.to_out(y.transpose(1, 2).reshape(B, T, H * D))  # (B, H, T, D) -> (B, T, C)

    def cached(self, x: Tensor, cache: tuple[Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """The package's step with a cache: one token (asserted), the keys kept cut to the window, returned cut."""
        assert x.shape[1] == 1
        q, k, v = self.project(x)
        q = q * (q.shape[-1] ** -0.5)  # the package's step, whatever the scale of its uncached path
        k, v = torch.cat((cache[0], k), dim=-2), torch.cat((cache[1], v), dim=-2)
        start = -(self.w + 1) if self.exact else -(self.w + (k.shape[-2] % self.w))
        k, v = k[..., start:, :], v[..., start:, :]
        if self.rotary:  # positions 0 .. N-1 over the keys kept, the query at the last
            n = torch.arange(k.shape[-2])
            q, k = self.rotate(q, n[-1:]), self.rotate(k, n)
        return self.out(torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v), (k, v)  # k as rotated: the cache

    def step(self, x: Tensor, cache):
        if cache is None:  # the package's forward(x, return_cache=True): the prefix's keys and values, unrotated
            _, k, v = self.project(x)
            return self.forward(x), (k, v)
        ys = []
        for n in range(x.shape[1]):  # its cache takes one token at a time
            y, cache = self.cached(x[:, n : n + 1], cache)
            ys.append(y)
        return torch.cat(ys, dim=1), cache
