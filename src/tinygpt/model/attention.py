"""Attention, written from the formula.

    Attention(Q, K, V) = softmax(Q K^T * scale + mask) V,    scale = 1 / sqrt(d_k) by default

Read top to bottom:

1. ``causal_mask`` / ``visibility_mask``: which key j each query i may see (True = may attend).
2. ``masked_softmax``: softmax over the visible keys only; a row with no visible key is all zeros.
3. ``attention_from_scores``: weights = masked_softmax(scores), out = weights @ V.
4. ``scaled_dot_product_attention``: scores = Q K^T * scale, then step 3.
5. ``CausalSelfAttention``: multi-head self-attention with a "math" path (the functions above,
   can return the weights) and an "sdpa" path (torch's fused kernel with the same scale and mask).

The textbook's other pieces (additive scoring, kernel regression, valid lengths) are in textbook.py.
Masked scores are filled with -inf, never a finite constant that growing logits could outgrow.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tinygpt.model.config import AttnConfig, check_heads, scale_factor


# ----------------------------------------------------------------------------- masks


def causal_mask(t_q: int, t_k: int, device: torch.device | None = None) -> Tensor:
    """(T_q, T_k) bool, True where query i may see key j: j <= i + (T_k - T_q).

    Bottom-right aligned: the T_q queries are the *last* T_q positions of the T_k keys,
    which is what a KV cache needs (T_q < T_k). For T_q == T_k it is the usual lower triangle.
    """
    offset = t_k - t_q
    i = torch.arange(t_q, device=device)[:, None]  # (T_q, 1)
    j = torch.arange(t_k, device=device)[None, :]  # (1, T_k)
    return j <= i + offset


def visibility_mask(
    t_q: int,
    t_k: int,
    *,
    causal: bool,
    padding_mask: Tensor | None,
    extra_dims: int,
    device: torch.device | None = None,
) -> Tensor | None:
    """The combined bool mask (True = query may attend key), or None when everything is visible.

    ``padding_mask`` is (B, T_k) with True = real token; the queries are its last T_q positions.
    The result broadcasts against scores (B, *[1] * extra_dims, T_q, T_k); without padding it is
    (T_q, T_k).
    """
    query_mask = None if padding_mask is None else padding_mask[:, t_k - t_q :]
    return cross_visibility_mask(t_q, t_k, causal=causal, key_mask=padding_mask, query_mask=query_mask,
                                 extra_dims=extra_dims, device=device)


def cross_visibility_mask(
    t_q: int,
    t_k: int,
    *,
    causal: bool,
    key_mask: Tensor | None,
    query_mask: Tensor | None,
    extra_dims: int,
    device: torch.device | None = None,
) -> Tensor | None:
    """``visibility_mask`` with the keys' and the queries' validity given apart (cross-attention: queries and keys
    are different sequences). ``key_mask`` (B, T_k): padded keys are invisible (the textbook's ``valid_lens``);
    ``query_mask`` (B, T_q): padded queries see nothing. Either may be None (all real)."""
    mask = causal_mask(t_q, t_k, device) if causal else None
    for pad, shape in ((key_mask, (1, t_k)), (query_mask, (t_q, 1))):
        if pad is not None:
            pad = pad.to(device=device, dtype=torch.bool)
            pad = pad.reshape(pad.shape[0], *(1,) * extra_dims, *shape)  # (B, 1.., 1, T_k) or (B, 1.., T_q, 1)
            mask = pad if mask is None else mask & pad
    return mask  # (B, 1.., T_q, T_k), (T_q, T_k) or None


# ----------------------------------------------------------------------------- softmax


def masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Softmax over the last dim, restricted to ``mask`` (bool, broadcastable to ``scores``, True = keep).

    Masked entries get weight exactly 0; a row with no kept entry is all zeros (not NaN),
    in the forward and the backward pass. (The textbook's valid lengths: tinygpt.model.textbook.)
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    if mask.dtype != torch.bool:
        raise ValueError(
            f"mask must be bool (True = keep), got {mask.dtype}; for valid lengths use "
            "tinygpt.model.textbook.valid_length_softmax."
        )
    try:
        mask = torch.broadcast_to(mask, scores.shape)
    except RuntimeError:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to scores {tuple(scores.shape)}."
        ) from None
    row_has_key = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1)
    scores = scores.masked_fill(~mask, float("-inf"))
    # An all -inf row would give 0/0 = NaN; give it finite scores, its weights are zeroed below.
    scores = scores.masked_fill(~row_has_key, 0.0)
    return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)


# ----------------------------------------------------------------------------- attention


def attention_from_scores(
    scores: Tensor,
    v: Tensor,
    *,
    causal: bool = True,
    padding_mask: Tensor | None = None,
    query_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """weights = masked_softmax(scores + mask), out = weights @ v. Returns (out, weights).

    scores: (..., T_q, T_k), v: (..., T_k, D_v) -> out (..., T_q, D_v), weights (..., T_q, T_k).
    padding_mask: bool (B, T_k), True = real key; padded keys get weight 0 (the textbook's valid_lens).
    query_mask: bool (B, T_q), True = real query; padded queries get weights 0 and output 0. Self-attention
    (scaled_dot_product_attention) passes both, the queries being the last T_q positions of the keys.
    """
    t_q, t_k = scores.shape[-2:]
    if v.shape[-2] != t_k:
        raise ValueError(f"v has {v.shape[-2]} positions but the scores have {t_k} keys.")
    check_padding_mask(padding_mask, scores.shape[0], t_k, scores=scores)
    check_padding_mask(query_mask, scores.shape[0], t_q, name="query_mask", axis="T_q", scores=scores)
    mask = cross_visibility_mask(
        t_q,
        t_k,
        causal=causal,
        key_mask=padding_mask,
        query_mask=query_mask,
        extra_dims=scores.dim() - 3,
        device=scores.device,
    )
    weights = masked_softmax(scores, mask)  # (..., T_q, T_k)
    return weights @ v, weights  # (..., T_q, D_v)


def normalised_entropy(w: Tensor | np.ndarray, causal: bool = True) -> Tensor | np.ndarray:
    """Each query row's attention entropy divided by log(the number of keys it sees): 1 = uniform over them, 0 =
    one-hot. w (..., T, T) attention weights, a torch tensor or a numpy array -> (..., rows) of the same kind, for
    the rows that have a choice (more than one visible key): row i sees i + 1 keys under the causal mask, T without."""
    T = w.shape[-1]
    if isinstance(w, Tensor):
        seen = torch.arange(1, T + 1, device=w.device) if causal else torch.full((T,), T, device=w.device)  # (T,)
        h = -(w * w.clamp_min(1e-30).log()).sum(-1)  # (..., T): each row's entropy, in nats
        return h[..., seen > 1] / torch.log(seen[seen > 1].float())
    seen = np.arange(1, T + 1) if causal else np.full(T, T)  # (T,)
    h = -(w * np.log(np.clip(w, 1e-30, None))).sum(-1)  # (..., T)
    return h[..., seen > 1] / np.log(seen[seen > 1])

def scaled_scores(q: Tensor, k: Tensor, scale: float, scale_at: str = "scores") -> Tensor:
    """q k^T * scale, the scale applied where ``scale_at`` says (scaled_dot_product_attention).
    q (..., T_q, D), k (..., T_k, D) -> (..., T_q, T_k)."""
    if scale_at == "qk":
        root = math.sqrt(scale)
        return (q * root) @ (k * root).transpose(-2, -1)  # (..., T_q, D) @ (..., D, T_k)
    if scale_at != "scores":
        raise ValueError(f"scale_at={scale_at!r} is not one of 'scores', 'qk'.")
    return (q @ k.transpose(-2, -1)) * scale  # (..., T_q, D) @ (..., D, T_k) -> (..., T_q, T_k)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = True,
    padding_mask: Tensor | None = None,
    scale: float | None = None,
    scale_at: str = "scores",
    keep: list | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T * scale + mask) v, exactly as written. Returns (out, weights).

    q: (..., T_q, D), k: (..., T_k, D), v: (..., T_k, D_v).
    scale: None means 1/sqrt(D); any number is used as given (1.0 = unscaled).
    scale_at: where the scale is applied: "scores" multiplies q k^T by it (the formula as written), "qk" multiplies
    q and k each by sqrt(scale) before the product (torch's own math attention does so "for stability": in float16
    the raw q k^T can pass 65504 where the scaled scores do not). The same function in exact arithmetic.
    causal: query i sees key j only if j <= i + (T_k - T_q).
    padding_mask: bool (B, T_k), True = real token; padded keys get weight 0, padded queries
    get weights 0 and output 0.
    keep: a list the scores (..., T_q, T_k), before the mask, are appended to (a probe's gradient reaches them).
    """
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(
            "q, k and v must have the same rank, at least 2 (..., T, D); "
            f"got shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}."
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share the feature size D, got {q.shape[-1]} and {k.shape[-1]}."
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of positions, got {k.shape[-2]} and {v.shape[-2]}."
        )
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = scaled_scores(q, k, scale, scale_at)  # (..., T_q, T_k)
    if keep is not None:
        keep.append(scores)
    t_q, t_k = scores.shape[-2:]
    check_padding_mask(padding_mask, scores.shape[0], t_k, scores=scores)
    queries = None if padding_mask is None else padding_mask[:, t_k - t_q :]  # one sequence: the last T_q keys
    return attention_from_scores(scores, v, causal=causal, padding_mask=padding_mask, query_mask=queries)


def check_padding_mask(
    mask: Tensor | None,
    batch: int,
    length: int,
    *,
    name: str = "padding_mask",
    axis: str = "T_k",
    scores: Tensor | None = None,
) -> None:
    """Nothing when ``mask`` is None or a bool (B, ``axis``) = (``batch``, ``length``) mask (True = real token);
    else one sentence naming it. With ``scores`` (the functional API) the sentence names their shape too, and
    scores of fewer than 3 dims (no batch dim) take no mask."""
    if mask is None:
        return
    if scores is not None and scores.dim() < 3:
        raise ValueError(f"{name} needs scores with a batch dim (B, ..., T_q, T_k), got scores {tuple(scores.shape)}.")
    if mask.dtype != torch.bool or mask.shape != (batch, length):
        of = "" if scores is None else f" for scores {tuple(scores.shape)}"
        raise ValueError(f"{name} must be bool of shape (B, {axis}) = ({batch}, {length}){of}, "
                         f"got {mask.dtype} {tuple(mask.shape)}.")


# ----------------------------------------------------------------------------- multi-head


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention: one fused qkv projection, H heads of size D = C / H, output projection.

    ``attn`` (an AttnConfig, kept as ``self.config``) says how: backend="math" computes softmax(q k^T * scale +
    mask) v with the functions above; backend="sdpa" calls torch's fused F.scaled_dot_product_attention with the
    same scale and mask. ``scale_factor`` is the number ``attn.scale`` names for this head size.
    ``dissect(x)`` is the opt-in way to see inside: the math path's weights (B, H, T, T), the logits and the
    queries and keys, for attention maps and diagnostics; ``forward`` always returns the output alone. A probe that
    needs the gradient reaching the scores sets ``keep`` to a list: each forward then runs the formula (the same
    function as sdpa) and appends its q, k, scores and weights, in the autograd graph.
    ``qk_norm=True`` applies a LayerNorm (over the head dim D, shared by heads) to the queries and to the
    keys before the scale (Dehghani et al. 2023): the logits stay bounded, |q.k| * scale <= D * scale for unit
    gains.
    """

    def __init__(self, n_embd: int, n_head: int, attn: AttnConfig | None = None, *, dropout: float = 0.0,
                 bias: bool = True):
        super().__init__()
        self.config = attn if attn is not None else AttnConfig()
        if not isinstance(self.config, AttnConfig):
            raise TypeError(f"attn must be an AttnConfig, got {type(self.config).__name__}.")
        self.n_embd, self.n_head, self.head_dim = n_embd, n_head, check_heads(n_embd, n_head)
        self.scale_factor = scale_factor(self.config.scale, self.head_dim)
        self.dropout = dropout
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)  # x -> q, k, v in one matmul
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.q_norm = nn.LayerNorm(self.head_dim, bias=bias) if self.config.qk_norm else None
        self.k_norm = nn.LayerNorm(self.head_dim, bias=bias) if self.config.qk_norm else None
        self.keep: list | None = None  # a probe's list: each forward appends q, k, scores, weights (the math path)

    def forward(self, x: Tensor, padding_mask: Tensor | None = None, kv_cache=None) -> Tensor:
        """x (B, T, C) -> (B, T, C). With ``kv_cache`` (one layer's view of a kv_cache.KVCache) the T
        tokens are the next ones after those cached: their keys and values are appended and the queries
        attend to all of them, the causal triangle aligned bottom-right (T_q < T_k). ``padding_mask`` (bool,
        True = real token) covers every key: (B, T), or (B, T_cached + T) with a cache."""
        if x.dim() != 3 or x.shape[-1] != self.n_embd:
            raise ValueError(f"expected input (B, T, {self.n_embd}), got {tuple(x.shape)}.")
        B, T, C = x.shape
        t_k = T + (kv_cache.cached if kv_cache is not None else 0)
        check_padding_mask(padding_mask, B, t_k)
        q, k, v = self._heads(x)  # 3 x (B, H, T, D)
        if kv_cache is not None:
            k, v = kv_cache.extend(k, v)  # (B, H, T_cached + T, D)

        if self.config.backend == "math" or self.keep is not None:  # a probe keeping the tensors: the formula
            scores = [] if self.keep is not None else None
            y, weights = scaled_dot_product_attention(
                q, k, v, causal=self.config.causal, padding_mask=padding_mask, scale=self.scale_factor,
                scale_at=self.config.scale_at, keep=scores,
            )  # y (B, H, T, D), weights (B, H, T, T)
            if self.keep is not None:
                self.keep.append({"q": q, "k": k, "scores": scores[0], "weights": weights})
            if self.training and self.dropout > 0:
                y = self.attn_dropout(weights) @ v  # (B, H, T, D)
        else:
            y = self._sdpa(q, k, v, padding_mask)  # (B, H, T, D)

        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, H, T, D) -> (B, T, C)
        return self.resid_dropout(self.c_proj(y))

    def dissect(self, x: Tensor, padding_mask: Tensor | None = None) -> dict[str, Tensor]:
        """What the attention computes on x (B, T, C), through the math path: ``weights`` (B, H, T, T) as
        the formula gives them (dropout aside), ``logits`` q k^T * scale before the mask (B, H, T, T), and
        ``q``, ``k`` (B, H, T, D) as the scores see them (after qk_norm)."""
        q, k, v = self._heads(x)  # 3 x (B, H, T, D)
        _, weights = scaled_dot_product_attention(
            q, k, v, causal=self.config.causal, padding_mask=padding_mask, scale=self.scale_factor,
            scale_at=self.config.scale_at,
        )  # (B, H, T, T)
        logits = scaled_scores(q, k, self.scale_factor, self.config.scale_at)  # (B, H, T, T)
        return {"weights": weights, "logits": logits, "q": q, "k": k}

    def _heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, C) -> q, k, v, each split into heads (B, H, T, D), from one fused projection
        (q and k LayerNorm-ed per head when qk_norm is on)."""
        B, T, C = x.shape
        qkv = self.c_attn(x).split(self.n_embd, dim=2)  # 3 x (B, T, C)
        q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in qkv)  # (B, H, T, D)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)  # normalised over D, (B, H, T, D)
        return q, k, v

    def queries_keys(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """q and k (B, H, T, D) as the attention sees them (after qk_norm), without the weights (init_stats)."""
        q, k, _ = self._heads(x)
        return q, k

    def _sdpa(self, q: Tensor, k: Tensor, v: Tensor, padding_mask: Tensor | None) -> Tensor:
        """The fused kernel, with the same explicit scale and the same mask as the math path."""
        dropout_p = self.dropout if self.training else 0.0  # SDPA applies dropout even in eval
        T_q, T_k = q.shape[-2], k.shape[-2]
        causal = self.config.causal
        if padding_mask is None and (not causal or T_q == T_k or T_q == 1):
            # square causal: the kernel's own (top-left) triangle is right; one query after a cache sees every key
            return F.scaled_dot_product_attention(
                q, k, v, dropout_p=dropout_p, is_causal=causal and T_q == T_k, scale=self.scale_factor
            )
        mask = visibility_mask(
            T_q, T_k, causal=causal, padding_mask=padding_mask, extra_dims=1, device=q.device
        )  # (B, 1, T_q, T_k) or (T_q, T_k); True = may attend, as SDPA reads it
        # SDPA returns NaN for a row with no visible key; open such rows and zero them after.
        row_has_key = mask.any(dim=-1, keepdim=True)  # (.., T_q, 1)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask | ~row_has_key, dropout_p=dropout_p, scale=self.scale_factor
        )  # (B, H, T_q, D)
        return y.masked_fill(~row_has_key, 0.0)

    def extra_repr(self) -> str:
        c = self.config
        return (f"n_head={self.n_head}, head_dim={self.head_dim}, causal={c.causal}, "
                f"scale={c.scale!r} ({self.scale_factor:.4g}), backend={c.backend!r}, qk_norm={c.qk_norm}"
                + (f", scale_at={c.scale_at!r}" if c.scale_at != "scores" else ""))
