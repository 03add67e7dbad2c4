"""The attention-mask bugs real code has had, for experiment 3 (configs/experiment/partial_leaks.yaml).

The production attention (tinygpt.model.attention) has one mask path: bottom-right causal, filled with -inf.
These are the slips that path avoids, each a ``mask`` function and one attention module that uses it:

- ``no_mask``: no mask at all (experiment 1's leak), here for single layers ("one layer leaky");
- ``off_by_one``: query i also sees key i+1, the classic ``triu(diagonal=2)`` where ``triu(diagonal=1)`` was meant;
- ``sliding_window``: a local window |i - j| < w without its causal half (transformers issue 31673 reported a
  sliding-window mask that let queries see the future);
- ``finite_fill``: the causal mask *added* as a finite value (``scores + fill * masked``, fill = -1e4), as the
  additive extended attention masks of BERT-style models add -10000 (transformers issue 12109): a masked key gets
  weight exp(masked score + fill - row max) / Z, which opens only when a masked score passes the row's largest
  visible one by about |fill|;
- ``replace_fill``: the masked scores *replaced* by a finite value (``where(mask, scores, fill)``), GPT-2's
  ``masked_bias = -1e4`` in transformers until PR 17306 (issues 15199 and 17121, minGPT issue 75): every masked
  key scores exactly ``fill``, so a row opens when all its visible scores fall below the fill, whatever the masked
  scores were.

A run gets one by naming it in ``model.patch`` (``- {_target_: tinygpt.experiments.partial_leaks.bugs.AttentionBug,
kind: ...}``, as configs/arm/partial_leaks/ do); ``AttentionBug(model)`` swaps the attention of the chosen layers for a
``BuggyAttention`` with the same weights. The model's config still says causal=true: that is the point, the
model believes it is causal (and the leak alarm, tinygpt.train.probes.leak_alarm, must catch it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

from tinygpt.model.attention import CausalSelfAttention, causal_mask
from tinygpt.model.gpt import GPT
from tinygpt.runtime.checks import one_of

KINDS = ("no_mask", "off_by_one", "sliding_window", "finite_fill", "replace_fill")


def check_bug(kind: str, window: int = 16, fill: float = -1.0e4) -> None:
    """A bug's settings, each mistake one sentence naming its key (AttentionBug's kind, window, fill), checked when the
    bug is named (AttentionBug) and when an attention is built with it (BuggyAttention)."""
    one_of("AttentionBug kind", kind, KINDS)
    if kind == "sliding_window" and window < 1:
        raise ValueError(f"AttentionBug window={window!r} must be a positive number of keys.")
    if kind in ("finite_fill", "replace_fill") and not fill < 0:
        raise ValueError(f"AttentionBug fill={fill!r} must be negative (the value given to masked scores).")


def visible_keys(kind: str, t_q: int, t_k: int, *, window: int = 16, device=None) -> Tensor | None:
    """(T_q, T_k) bool, True where the buggy mask lets query i see key j (queries are the last T_q positions of
    the T_k keys, as in the production causal_mask); None for no mask. ``finite_fill``'s mask is the correct
    causal one, and ``replace_fill``'s: their bugs are in how the mask is applied, not in which keys it names."""
    offset = t_k - t_q
    i = torch.arange(t_q, device=device)[:, None] + offset  # (T_q, 1): each query's absolute position
    j = torch.arange(t_k, device=device)[None, :]  # (1, T_k)
    if kind == "no_mask":
        return None
    if kind == "off_by_one":
        return j <= i + 1  # the diagonal above the main one is left open
    if kind == "sliding_window":
        return (i - j).abs() < window  # a band: w - 1 keys back and w - 1 ahead
    one_of("AttentionBug kind", kind, KINDS)  # what is left of them, finite_fill and replace_fill, masks correctly
    return causal_mask(t_q, t_k, device)


class BuggyAttention(CausalSelfAttention):
    """CausalSelfAttention with one of the bugs above in place of the correct mask, and nothing else: the scores, the
    scale and every other option are the production attention's own (tinygpt.model.attention.attention), which
    takes the formula for it, with or without a KV cache. Padding masks are not supported (experiment 3 has none)."""

    def __init__(self, *args, kind: str, window: int = 16, fill: float = -1.0e4, **kwargs):
        super().__init__(*args, **kwargs)
        check_bug(kind, window, fill)
        self.kind, self.window, self.fill = kind, window, float(fill)

    def weights_of(self, scores: Tensor, mask: Tensor | None = None) -> Tensor:
        """scores (B, H, T_q, T_k) -> attention weights (B, H, T_q, T_k) under this bug, in place of the correct
        ``masked_softmax(scores, mask)``."""
        if mask is not None and mask.dim() > 2:  # the correct mask has a batch dim: a padding mask is in it
            raise ValueError("BuggyAttention does not take a padding mask (experiment 3 trains without padding).")
        t_q, t_k = scores.shape[-2:]
        visible = visible_keys(self.kind, t_q, t_k, window=self.window, device=scores.device)
        if visible is None:
            return torch.softmax(scores, dim=-1)
        if self.kind == "finite_fill":  # the bug: added, not filled; the masked keys keep their scores
            return torch.softmax(scores + self.fill * (~visible).to(scores.dtype), dim=-1)
        if self.kind == "replace_fill":  # GPT-2's masked_bias: the masked scores become the fill itself
            return torch.softmax(torch.where(visible, scores, torch.full_like(scores, self.fill)), dim=-1)
        return torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)  # every row keeps its own key

    def extra_repr(self) -> str:
        details = {"sliding_window": f", window={self.window}", "finite_fill": f", fill={self.fill:g}",
                   "replace_fill": f", fill={self.fill:g}"}
        detail = details.get(self.kind, "")
        return f"BUG {self.kind}{detail}; " + super().extra_repr()


class AttentionBug:
    """``AttentionBug(kind, layers)(model)``: the attention of ``layers`` (indices, negative from the end; None =
    every layer) replaced by a BuggyAttention of ``kind`` with the same weights. Returns the model."""

    def __init__(self, kind: str, layers: Sequence[int] | None = None, window: int = 16, fill: float = -1.0e4):
        check_bug(kind, window, fill)
        self.kind, self.window, self.fill = kind, window, fill
        self.layers = None if layers is None else [int(i) for i in layers]

    def __call__(self, model: GPT) -> GPT:
        n = len(model.blocks)
        chosen = range(n) if self.layers is None else self.layers
        for i in chosen:
            if not -n <= i < n:
                raise ValueError(f"AttentionBug layers has {i}, but the model has {n} layers (0..{n - 1}).")
            old: CausalSelfAttention = model.blocks[i].attn
            new = BuggyAttention(
                old.n_embd, old.n_head, replace(old.config, backend="math"), dropout=old.dropout,
                bias=old.c_attn.bias is not None, position=old.position, rope_base=old.rope_base, kind=self.kind,
                window=self.window, fill=self.fill,
            ).to(old.c_attn.weight.device, old.c_attn.weight.dtype)
            new.load_state_dict(old.state_dict())
            model.blocks[i].attn = new
        return model
