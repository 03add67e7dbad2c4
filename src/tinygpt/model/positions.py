"""Where a token is, as attention sees it (``model.position``; the choices are config.POSITIONS):

- ``learned``: GPT-2's table ``wpe``, one vector per position added to the token's embedding (model/gpt.py); nothing
  here. It ends at block_size.
- ``none``: nothing. Attention alone is blind to order; the causal mask still tells a query how many keys it sees.
- ``rope`` (Su et al. 2021): q and k rotated by their positions before the scores (``rotate``, called by
  CausalSelfAttention.prepare, so a KV cache keeps the keys rotated at their own positions): the score of q at i and
  k at j then depends on i - j only.
- ``alibi`` (Press et al. 2022): no embedding; head h's scores get ``-slope_h * |i - j|`` (``alibi_bias``, added in
  tinygpt.model.attention.attention, on both backends and in the cached step).

Positions are whole numbers per token, ``(T,)`` or per row ``(B, T)`` (a left-padded batch counts each row's real
tokens: GPT._positions).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

RELATIVE = ("rope", "alibi")  # the positions attention itself reads (q and k rotated, a bias on the scores)


def rotate(x: Tensor, positions: Tensor, base: float) -> Tensor:
    """RoPE: x (B, H, T, D) with each pair of dims rotated by the angle p * base^(-2i / D), p its token's position
    (``positions`` (T,) or (B, T)), i = 0 .. D/2 - 1 the pair's index. Returns (B, H, T, D).

    The pairing is half-split, (x_i, x_{i + D/2}), as GPT-NeoX and Llama (transformers' ``rotate_half``), not the
    paper's interleaved (x_{2i}, x_{2i+1}): the two are the same function up to a fixed permutation of the head's dims,
    which W_Q and W_K absorb when training from scratch, so nothing is lost; half-split takes contiguous halves (no
    strided gather) and is the convention the reference we test against (transformers' Llama) uses.
    The angles are computed in float32 at least: positions past 256 are not whole numbers in bfloat16."""
    D = x.shape[-1]
    work = torch.promote_types(x.dtype, torch.float32)
    inv_freq = base ** (-torch.arange(0, D, 2, dtype=work, device=x.device) / D)  # (D/2,)
    angles = positions.to(device=x.device, dtype=work)[..., None] * inv_freq  # (T, D/2) or (B, T, D/2)
    if angles.dim() == 3:
        angles = angles[:, None]  # (B, 1, T, D/2): the same for every head
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]  # 2 x (B, H, T, D/2): the pairs (x_i, x_{i + D/2})
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)  # (B, H, T, D)


def alibi_slopes(n_head: int) -> list[float]:
    """ALiBi's slope per head (Press et al. 2022): for H a power of 2, 2^(-8 i / H), i = 1 .. H (a geometric sequence
    from 2^(-8/H) to 2^-8); otherwise the slopes of the power of 2 just below H, then every other slope of the next
    power of 2 for the heads left (the paper's code, ``get_slopes``)."""
    def power_of_2(n: int) -> list[float]:
        return [2.0 ** (-8.0 * i / n) for i in range(1, n + 1)]

    if n_head & (n_head - 1) == 0:
        return power_of_2(n_head)
    below = 2 ** math.floor(math.log2(n_head))
    return power_of_2(below) + power_of_2(2 * below)[0::2][: n_head - below]


def alibi_bias(slopes: Tensor, positions: Tensor, t_q: int) -> Tensor:
    """ALiBi's bias on the scores: ``-slopes[h] * |p_i - p_j|`` for query i and key j, the queries being the last
    ``t_q`` of the keys. slopes (H,); positions of the keys (T_k,) or (B, T_k) -> (H, T_q, T_k) or (B, H, T_q, T_k).

    For the keys a causal query sees (j <= i) this is the paper's -m (i - j); the absolute value gives a model without
    the mask the symmetric form (as MosaicBERT's), not a bias that grows towards the far future. Computed in float32 at
    least (distances past 256 are not whole numbers in bfloat16), returned in the slopes' dtype."""
    work = torch.promote_types(slopes.dtype, torch.float32)
    p_k = positions.to(work)  # (..., T_k)
    p_q = p_k[..., -t_q:]  # (..., T_q)
    distance = (p_q[..., :, None] - p_k[..., None, :]).abs()  # (T_q, T_k) or (B, T_q, T_k)
    if distance.dim() == 3:
        distance = distance[:, None]  # (B, 1, T_q, T_k)
    return (-slopes.to(work)[:, None, None] * distance).to(slopes.dtype)  # (H, T_q, T_k) or (B, H, T_q, T_k)
