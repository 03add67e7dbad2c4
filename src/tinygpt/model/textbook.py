"""The textbook's other attention pieces, built on the formula in attention.py (used by the tests and the lessons,
not by the GPT):

1. ``lengths_to_mask`` and ``valid_length_softmax``: the textbook's ``valid_lens``, a count of visible keys per
   row instead of a bool mask.
2. ``AdditiveScore``: the other classic score, a(q, k) = w_v^T tanh(W_q q + W_k k), for queries and keys of
   different sizes.
3. ``nadaraya_watson``: attention pooling as kernel regression (the textbook's first example).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tinygpt.model.attention import attention_from_scores, masked_softmax

# ----------------------------------------------------------------------------- valid lengths


def lengths_to_mask(valid_lens: Tensor, t_k: int) -> Tensor:
    """Valid lengths (B,) or (B, T_q) -> bool mask (B, 1, T_k) or (B, T_q, T_k): key j visible if j < len."""
    if valid_lens.dim() not in (1, 2):
        raise ValueError(
            f"valid_lens must have shape (B,) or (B, T_q), got {tuple(valid_lens.shape)}."
        )
    j = torch.arange(t_k, device=valid_lens.device)
    if valid_lens.dim() == 1:
        return j[None, None, :] < valid_lens[:, None, None]  # (B, 1, T_k)
    return j[None, None, :] < valid_lens[:, :, None]  # (B, T_q, T_k)


def valid_length_softmax(scores: Tensor, valid_lens: Tensor) -> Tensor:
    """masked_softmax over the first ``valid_lens`` keys of each row: scores (B, T_q, T_k), valid_lens (B,) or
    (B, T_q). A row with no valid key is all zeros (not NaN)."""
    if scores.dim() != 3:
        raise ValueError(f"valid lengths need scores of shape (B, T_q, T_k), got {tuple(scores.shape)}.")
    return masked_softmax(scores, lengths_to_mask(valid_lens, scores.shape[-1]))


# ----------------------------------------------------------------------------- other scores



class AdditiveScore(nn.Module):
    """Additive attention score a(q, k) = w_v^T tanh(W_q q + W_k k).

    Queries and keys may have different sizes. ``forward(q, k)`` gives scores (..., T_q, T_k),
    ``attend(q, k, v)`` runs the whole attention with these scores.
    """

    def __init__(self, query_dim: int, key_dim: int, hidden: int):
        super().__init__()
        self.W_q = nn.Linear(query_dim, hidden, bias=False)
        self.W_k = nn.Linear(key_dim, hidden, bias=False)
        self.w_v = nn.Linear(hidden, 1, bias=False)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        if q.dim() != k.dim() or q.dim() < 2:
            raise ValueError(
                f"q and k must have the same rank, at least 2, got {tuple(q.shape)} and {tuple(k.shape)}."
            )
        q = self.W_q(q).unsqueeze(-2)  # (..., T_q, 1, h)
        k = self.W_k(k).unsqueeze(-3)  # (..., 1, T_k, h)
        return self.w_v(torch.tanh(q + k)).squeeze(-1)  # (..., T_q, T_k, 1) -> (..., T_q, T_k)

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool = False,
        padding_mask: Tensor | None = None,
        query_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """(out (..., T_q, D_v), weights (..., T_q, T_k)). ``padding_mask`` (B, T_k) masks the padded keys only,
        as the textbook's ``valid_lens``; ``query_mask`` (B, T_q), if given, zeroes the padded queries' output."""
        return attention_from_scores(self(q, k), v, causal=causal, padding_mask=padding_mask, query_mask=query_mask)


def nadaraya_watson(
    queries: Tensor, keys: Tensor, values: Tensor, w: Tensor | float | None = None
) -> tuple[Tensor, Tensor]:
    """Attention pooling as kernel regression: f(x) = sum_i softmax_i(-((x - x_i) w)^2 / 2) y_i.

    queries (n_q,), keys (n_k,), values (n_k,) or (n_k, d). ``w`` (the kernel's inverse width)
    defaults to 1; pass a tensor with requires_grad (or an nn.Parameter) to learn it.
    Returns (predictions (n_q,) or (n_q, d), weights (n_q, n_k)).
    """
    if queries.dim() != 1 or keys.dim() != 1 or values.dim() not in (1, 2):
        raise ValueError(
            "nadaraya_watson expects queries (n_q,), keys (n_k,), values (n_k,) or (n_k, d); got "
            f"{tuple(queries.shape)}, {tuple(keys.shape)}, {tuple(values.shape)}."
        )
    if keys.shape[0] != values.shape[0]:
        raise ValueError(f"{keys.shape[0]} keys but {values.shape[0]} values.")
    if w is None:
        w = 1.0
    diff = (queries[:, None] - keys[None, :]) * w  # (n_q, n_k)
    weights = torch.softmax(-(diff**2) / 2, dim=-1)  # (n_q, n_k)
    return weights @ values, weights
