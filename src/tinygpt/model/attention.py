"""Attention, written from the formula.

    Attention(Q, K, V) = softmax(Q K^T * scale + mask) V,    scale = 1 / sqrt(d_k) by default

Read top to bottom:

1. ``causal_mask`` / ``visibility_mask``: which key j each query i may see (True = may attend).
2. ``masked_softmax``: softmax over the visible keys only; a row with no visible key is all zeros.
3. ``attention_from_scores``: weights = masked_softmax(scores), out = weights @ V.
4. ``scaled_scores``: Q K^T * scale, the scale where ``scale_at`` puts it.
5. ``attention``: THE computation. Every path calls it (the module's forward, ``dissect``, the probes, decoding's
   cached step, a ``model.patch`` that swaps the masked softmax): it takes q, k, v, the layer's ``AttnConfig``, the
   mask and the keys' positions, applies every option (ALiBi's bias among them), and ``route`` chooses, in one place,
   the explicit formula or torch's fused kernel (and says why when it falls back to the formula).
   ``scaled_dot_product_attention`` is its functional form.
6. ``CausalSelfAttention``: multi-head self-attention around it: the projections, ``prepare`` (the options that act
   on q and k before a cache keeps the keys: qk_norm, then RoPE), ``attend`` (``attention`` with this layer's
   settings). Its ``position`` (model.position, tinygpt.model.positions) is the GPT's, handed to every layer.

A new attention option: a field of AttnConfig (model/config.py), its commented line in configs/model/baby.yaml, and
its arithmetic here: in ``prepare`` if it acts on q and k, in ``attention``'s formula if on the scores, and a line in
``route`` if the fused kernel cannot do it. tests/model/test_attention_paths.py then runs it through every path.
The textbook's other pieces (additive scoring, kernel regression, valid lengths) are in textbook.py.
Masked scores are filled with -inf, never a finite constant that growing logits could outgrow.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tinygpt.model.config import POSITIONS, AttnConfig, check_heads, scale_factor
from tinygpt.model.positions import RELATIVE, alibi_bias, alibi_slopes, rotate
from tinygpt.runtime.checks import one_of


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
    """softmax(q k^T * scale + mask) v, exactly as written: ``attention`` on the formula, settings given one by one.
    Returns (out, weights).

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
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    config = AttnConfig(causal=causal, scale=scale, backend="math", scale_at=scale_at)
    y, weights = attention(q, k, v, config, scale=scale, padding_mask=padding_mask, need_weights=True, keep=keep)
    return y, weights


# ----------------------------------------------------------------------------- the one computation


def route(config: AttnConfig, *, need_weights: bool = False, own_mask: bool = False) -> tuple[str, str]:
    """Who computes this attention, "math" (the explicit formula) or "sdpa" (torch's fused kernel), and why: the
    config's backend, unless something only the formula gives was asked for. An option the fused kernel cannot do
    adds its line here (the formula then computes it on every backend)."""
    if config.backend == "math":
        return "math", "model.attn.backend=math"
    if need_weights:
        return "math", "the weights or scores were asked for (dissect, a probe): the fused kernel never forms them"
    if own_mask:
        return "math", "this attention applies its own mask (a deliberate bug): the fused kernel takes a bool one"
    if config.scale_at != "scores":
        return "math", f"model.attn.scale_at={config.scale_at!r} places the scale inside the formula"
    return "sdpa", "model.attn.backend=sdpa"


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    config: AttnConfig,
    *,
    scale: float | None = None,
    padding_mask: Tensor | None = None,
    positions: Tensor | None = None,
    slopes: Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    keep: list | None = None,
    weights_of=None,
) -> tuple[Tensor, Tensor | None]:
    """softmax(q k^T * scale + mask) v with every option of ``config``: (out (..., T_q, D_v), weights (..., T_q, T_k)
    on the formula, None from the fused kernel). The one place attention is computed and its route chosen.

    q (..., T_q, D), k (..., T_k, D), v (..., T_k, D_v): as the scores see them (after ``prepare``'s options).
    scale: the number config.scale names for this head size (None: computed here; a module passes its own).
    The mask: config.causal (bottom-right: the T_q queries are the last of the T_k keys, so a KV cache's offset is
    T_k - T_q) and ``padding_mask`` (B, T_k) bool, True = real token (padded queries give 0).
    positions: each key's position, (T_k,) or per row (B, T_k), the queries being the last T_q of them; read with
    ``slopes`` (H,), ALiBi's (model.position=alibi): the scores get -slopes[h] * |p_i - p_j| before the mask, on
    the formula and, as an additive float mask, in the fused kernel.
    dropout_p: on the weights (pass 0 when not training: the fused kernel applies it even in eval).
    need_weights or ``keep`` (a list the scores before the mask are appended to): the formula, whatever the backend.
    weights_of: (scores, mask) -> weights in place of ``masked_softmax`` (a subclass's deliberate bug): the formula.
    """
    if scale is None:
        scale = scale_factor(config.scale, q.shape[-1])
    t_q, t_k = q.shape[-2], k.shape[-2]
    bias = None
    if slopes is not None:
        check_positions(positions, q.shape[0], t_k)
        bias = alibi_bias(slopes.to(q.dtype), positions, t_q)  # (H, T_q, T_k) or (B, H, T_q, T_k)
    backend, _ = route(config, need_weights=need_weights or keep is not None, own_mask=weights_of is not None)
    if backend == "sdpa":
        return _fused(q, k, v, config.causal, scale, padding_mask, dropout_p, bias), None
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(
            "q, k and v must have the same rank, at least 2 (..., T, D); "
            f"got shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}."
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the feature size D, got {q.shape[-1]} and {k.shape[-1]}.")
    if t_k != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of positions, got {t_k} and {v.shape[-2]}.")
    scores = scaled_scores(q, k, scale, config.scale_at)  # (..., T_q, T_k)
    if bias is not None:
        scores = scores + bias  # ALiBi: -slope_h * |p_i - p_j|, before the mask
    if keep is not None:
        keep.append(scores)
    check_padding_mask(padding_mask, scores.shape[0], t_k, scores=scores)
    mask = visibility_mask(t_q, t_k, causal=config.causal, padding_mask=padding_mask, extra_dims=scores.dim() - 3,
                           device=scores.device)  # (B, 1.., T_q, T_k), (T_q, T_k) or None
    weights = (weights_of or masked_softmax)(scores, mask)  # (..., T_q, T_k)
    dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    return dropped @ v, weights  # (..., T_q, D_v)


def _fused(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, padding_mask: Tensor | None,
           dropout_p: float, bias: Tensor | None = None) -> Tensor:
    """torch's fused kernel with the same explicit scale, the same mask and the same bias on the scores (ALiBi's, or
    None) as the formula: (..., T_q, D_v). The bias goes in as a float mask, -inf where a key is hidden."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    if bias is not None:
        mask = visibility_mask(T_q, T_k, causal=causal, padding_mask=padding_mask, extra_dims=q.dim() - 3,
                               device=q.device)  # (B, 1, T_q, T_k), (T_q, T_k) or None
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=scale)
        row_has_key = mask.any(dim=-1, keepdim=True)  # (.., T_q, 1): rows with none are opened, then zeroed
        opened = torch.where(mask | ~row_has_key, bias, float("-inf"))  # (B, H, T_q, T_k) or (H, T_q, T_k)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=opened, dropout_p=dropout_p, scale=scale)
        return y.masked_fill(~row_has_key, 0.0)  # (B, H, T_q, D)
    if padding_mask is None and (not causal or T_q == T_k or T_q == 1):
        # square causal: the kernel's own (top-left) triangle is right; one query after a cache sees every key
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=causal and T_q == T_k,
                                              scale=scale)
    mask = visibility_mask(
        T_q, T_k, causal=causal, padding_mask=padding_mask, extra_dims=q.dim() - 3, device=q.device
    )  # (B, 1, T_q, T_k) or (T_q, T_k); True = may attend, as SDPA reads it
    # SDPA returns NaN for a row with no visible key; open such rows and zero them after.
    row_has_key = mask.any(dim=-1, keepdim=True)  # (.., T_q, 1)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~row_has_key, dropout_p=dropout_p, scale=scale)
    return y.masked_fill(~row_has_key, 0.0)  # (B, H, T_q, D)


def check_positions(positions: Tensor | None, batch: int, length: int) -> None:
    """Nothing when ``positions`` holds one whole number per key, (T_k,) or (B, T_k); else one sentence."""
    if positions is None:
        raise ValueError("ALiBi's slopes were given without the keys' positions; pass positions (T_k,) or (B, T_k).")
    if positions.is_floating_point() or positions.shape not in ((length,), (batch, length)):
        raise ValueError(f"positions must be whole numbers of shape (T_k,) = ({length},) or (B, T_k) = ({batch}, "
                         f"{length}), got {positions.dtype} {tuple(positions.shape)}.")


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

    ``attn`` (an AttnConfig, kept as ``self.config``) says how; ``attention`` above computes it, on the formula
    (backend="math": softmax(q k^T * scale + mask) v, the weights in hand) or torch's fused kernel (backend="sdpa",
    the same scale and mask). ``scale_factor`` is the number ``attn.scale`` names for this head size.
    ``dissect(x)`` is the opt-in way to see inside: the formula's weights (B, H, T, T), the logits and the
    queries and keys, for attention maps and diagnostics; ``forward`` always returns the output alone. A probe that
    needs the gradient reaching the scores sets ``keep`` to a list: each forward then runs the formula (the same
    function as sdpa) and appends its q, k, scores and weights, in the autograd graph.
    ``qk_norm=True`` applies a LayerNorm (over the head dim D, shared by heads) to the queries and to the
    keys before the scale (Dehghani et al. 2023): the logits stay bounded, |q.k| * scale <= D * scale for unit
    gains.
    ``position`` (model.position): ``rope`` rotates q and k in ``prepare`` (after qk_norm, before a cache keeps the
    key), ``alibi`` adds its bias in ``attention``; ``learned`` and ``none`` do nothing here (the GPT adds its table,
    or nothing). Each call may give the keys' ``positions`` ((T_k,) or per row (B, T_k), the queries the last T of
    them); without them they are 0 .. T_k - 1, counted from the first cached token.
    """

    weights_of = None  # (scores, mask) -> weights in place of masked_softmax: a subclass's deliberate bug (model.patch)

    def __init__(self, n_embd: int, n_head: int, attn: AttnConfig | None = None, *, dropout: float = 0.0,
                 bias: bool = True, position: str = "learned", rope_base: float = 10000.0):
        super().__init__()
        self.config = attn if attn is not None else AttnConfig()
        if not isinstance(self.config, AttnConfig):
            raise TypeError(f"attn must be an AttnConfig, got {type(self.config).__name__}.")
        self.n_embd, self.n_head, self.head_dim = n_embd, n_head, check_heads(n_embd, n_head)
        one_of("model.position", position, POSITIONS)
        if position == "rope" and self.head_dim % 2:
            raise ValueError(f"model.position=rope turns pairs of dims, but the head size is {self.head_dim}, odd.")
        self.position, self.rope_base = position, float(rope_base)
        self.slopes = alibi_slopes(n_head) if position == "alibi" else None  # ALiBi's, one per head
        self.scale_factor = scale_factor(self.config.scale, self.head_dim)
        self.dropout = dropout
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)  # x -> q, k, v in one matmul
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)
        self.q_norm = nn.LayerNorm(self.head_dim, bias=bias) if self.config.qk_norm else None
        self.k_norm = nn.LayerNorm(self.head_dim, bias=bias) if self.config.qk_norm else None
        self.keep: list | None = None  # a probe's list: each forward appends q, k, scores, weights (the math path)

    def forward(self, x: Tensor, padding_mask: Tensor | None = None, kv_cache=None,
                positions: Tensor | None = None) -> Tensor:
        """x (B, T, C) -> (B, T, C). With ``kv_cache`` (one layer's view of a kv_cache.KVCache) the T
        tokens are the next ones after those cached: their keys and values are appended and the queries
        attend to all of them, the causal triangle aligned bottom-right (T_q < T_k). ``padding_mask`` (bool,
        True = real token) covers every key: (B, T), or (B, T_cached + T) with a cache; ``positions`` too, the keys'
        (T_k,) or (B, T_k) (default 0 .. T_k - 1), read by RoPE and ALiBi."""
        if x.dim() != 3 or x.shape[-1] != self.n_embd:
            raise ValueError(f"expected input (B, T, {self.n_embd}), got {tuple(x.shape)}.")
        B, T, C = x.shape
        t_k = T + (kv_cache.cached if kv_cache is not None else 0)
        check_padding_mask(padding_mask, B, t_k)
        positions = self.key_positions(positions, B, t_k, x.device)  # (T_k,), (B, T_k), or None: not read
        q, k, v = self._heads(x, None if positions is None else positions[..., t_k - T:])  # 3 x (B, H, T, D)
        if kv_cache is not None:
            k, v = kv_cache.extend(k, v)  # (B, H, T_cached + T, D)
        if self.keep is None:
            y, _ = self.attend(q, k, v, padding_mask, positions=positions)  # (B, H, T, D)
        else:  # a probe keeping the tensors: the formula
            scores = []
            y, weights = self.attend(q, k, v, padding_mask, positions=positions, keep=scores)  # y (B, H, T, D)
            self.keep.append({"q": q, "k": k, "scores": scores[0], "weights": weights})
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, H, T, D) -> (B, T, C)
        return self.resid_dropout(self.c_proj(y))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, padding_mask: Tensor | None = None, *,
               positions: Tensor | None = None, need_weights: bool = False, keep: list | None = None,
               dropout: bool = True) -> tuple[Tensor, Tensor | None]:
        """``attention`` with this layer's config, scale, positions (ALiBi's slopes), dropout (training only;
        ``dropout=False`` turns it off) and mask: q (B, H, T_q, D), k, v (B, H, T_k, D) as the scores see them
        (``prepare``d) -> (out (B, H, T_q, D), weights (B, H, T_q, T_k) or None from the fused kernel)."""
        p = self.dropout if dropout and self.training else 0.0  # SDPA applies dropout even in eval
        slopes = self.alibi(q) if self.slopes is not None else None
        if slopes is not None and positions is None:
            positions = torch.arange(k.shape[-2], device=q.device)  # (T_k,)
        return attention(q, k, v, self.config, scale=self.scale_factor, padding_mask=padding_mask,
                         positions=positions, slopes=slopes, dropout_p=p, need_weights=need_weights, keep=keep,
                         weights_of=self.weights_of)

    def alibi(self, like: Tensor) -> Tensor:
        """ALiBi's slopes (H,) in ``like``'s dtype and device (made from the float64 numbers, not a rounded buffer)."""
        return torch.tensor(self.slopes, dtype=like.dtype, device=like.device)

    def key_positions(self, positions: Tensor | None, batch: int, t_k: int, device) -> Tensor | None:
        """The keys' positions this layer reads: those given (checked: (T_k,) or (B, T_k)), else 0 .. T_k - 1; None
        when its position option reads none (learned, none)."""
        if self.position not in RELATIVE:
            return None
        if positions is None:
            return torch.arange(t_k, device=device)  # (T_k,)
        check_positions(positions, batch, t_k)
        return positions

    def route(self, *, need_weights: bool = False) -> tuple[str, str]:
        """Who computes this layer's attention, "math" or "sdpa", and why (``route`` above)."""
        return route(self.config, need_weights=need_weights or self.keep is not None,
                     own_mask=self.weights_of is not None)

    def dissect(self, x: Tensor, padding_mask: Tensor | None = None,
                positions: Tensor | None = None) -> dict[str, Tensor]:
        """What the attention computes on x (B, T, C), through the formula: ``weights`` (B, H, T, T) as
        the formula gives them (dropout aside), ``logits`` q k^T * scale (+ ALiBi's bias) before the mask
        (B, H, T, T), and ``q``, ``k`` (B, H, T, D) as the scores see them (after qk_norm and RoPE)."""
        positions = self.key_positions(positions, x.shape[0], x.shape[1], x.device)  # (T,), (B, T) or None
        q, k, v = self._heads(x, positions)  # 3 x (B, H, T, D)
        logits = []
        _, weights = self.attend(q, k, v, padding_mask, positions=positions, keep=logits, dropout=False)  # (B, H, T, T)
        return {"weights": weights, "logits": logits[0], "q": q, "k": k}

    def prepares(self) -> bool:
        """Whether ``prepare`` changes q or k for this layer (a caller may skip it otherwise: decoding's cached step).
        A new option in ``prepare`` names itself here too (tests/model/test_attention_paths.py fails where not)."""
        return self.q_norm is not None or self.position == "rope"

    def prepare(self, q: Tensor, k: Tensor, positions: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The options that act on the queries and keys themselves, before a cache keeps the keys: qk_norm (a
        LayerNorm over D), then RoPE (each rotated at its token's position: ``positions`` (T,) or (B, T), default
        0 .. T - 1). q (B, H, T, D), k (B, H, T, D) -> the same shapes."""
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)  # normalised over D, (B, H, T, D)
        if self.position == "rope":
            if positions is None:
                positions = torch.arange(q.shape[-2], device=q.device)  # (T,)
            q, k = rotate(q, positions, self.rope_base), rotate(k, positions, self.rope_base)  # (B, H, T, D)
        return q, k

    def _heads(self, x: Tensor, positions: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, C) -> q, k, v, each split into heads (B, H, T, D), from one fused projection, q and k
        ``prepare``d at ``positions`` (T,) or (B, T)."""
        B, T, C = x.shape
        qkv = self.c_attn(x).split(self.n_embd, dim=2)  # 3 x (B, T, C)
        q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in qkv)  # (B, H, T, D)
        q, k = self.prepare(q, k, positions)
        return q, k, v

    def queries_keys(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """q and k (B, H, T, D) as the attention sees them (after qk_norm and RoPE), without the weights
        (init_stats)."""
        q, k, _ = self._heads(x)
        return q, k

    def extra_repr(self) -> str:
        c = self.config
        return (f"n_head={self.n_head}, head_dim={self.head_dim}, causal={c.causal}, "
                f"scale={c.scale!r} ({self.scale_factor:.4g}), backend={c.backend!r}, qk_norm={c.qk_norm}"
                + (f", scale_at={c.scale_at!r}" if c.scale_at != "scores" else "")
                + (f", position={self.position!r}" if self.position in RELATIVE else "")
                + (f" (base {self.rope_base:g})" if self.position == "rope" else ""))
