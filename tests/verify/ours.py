"""tinygpt's own attention and GPT as tinygpt.verify sees them, for every model.position, and the position bugs a
practitioner plants in them, each a subclass that changes one method (as experiment 3's BuggyAttention changes the
mask): RoPE's offset forgotten in the cache, RoPE applied to the values, ALiBi's slopes of the wrong sign, ALiBi's
bias added after a finite mask, positions that restart inside a row as a packed batch's would, or that count the
pads."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from tinygpt.model.attention import CausalSelfAttention, visibility_mask
from tinygpt.model.config import AttnConfig
from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.model.kv_cache import KVCache
from tinygpt.model.positions import rotate
from tinygpt.sampling.generate import CachedStep

VOCAB = 50


class RopeOffsetForgotten(CausalSelfAttention):
    """Each call rotates its new queries and keys at 0 .. T - 1: right for a whole sequence, wrong for the tokens
    after a cache (their offset, the number of tokens cached, forgotten)."""

    def prepare(self, q: Tensor, k: Tensor, positions: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return super().prepare(q, k, None)


class RopeOnValues(CausalSelfAttention):
    """The values rotated as well as the queries and keys."""

    def _heads(self, x: Tensor, positions: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = super()._heads(x, positions)  # 3 x (B, H, T, D)
        at = positions if positions is not None else torch.arange(x.shape[1])  # (T,) or (B, T)
        return q, k, rotate(v, at, self.rope_base)


class AlibiSlopesNegated(CausalSelfAttention):
    """ALiBi's slopes of the wrong sign (attention-gym#86's slip: the bias written m (i - j)): farther keys favoured."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.slopes = [-m for m in self.slopes]


class AlibiAfterFiniteMask(CausalSelfAttention):
    """The scores masked first with a finite fill (GPT-2's masked_bias, -1e4), ALiBi's bias added after as the paper's
    code writes it, -m (i - j): positive on a hidden future key, it lifts the fill. With -inf (or the dtype's lowest
    value) the order is immaterial, -inf + b = -inf: the same function (tests/verify/test_known_answers.py)."""

    fill = -1.0e4

    def attend(self, q, k, v, padding_mask=None, *, positions=None, need_weights=False, keep=None, dropout=True):
        t_q, t_k = q.shape[-2], k.shape[-2]
        mask = visibility_mask(t_q, t_k, causal=True, padding_mask=padding_mask, extra_dims=1, device=q.device)
        scores = (q @ k.transpose(-2, -1)) * self.scale_factor  # (B, H, T_q, T_k)
        i = torch.arange(t_q)[:, None] + t_k - t_q  # (T_q, 1)
        bias = -self.alibi(q)[:, None, None] * (i - torch.arange(t_k)[None, :])  # (H, T_q, T_k)
        w = torch.softmax(scores.masked_fill(~mask, self.fill) + bias, dim=-1)  # the bias after the mask
        return w @ v, w


def attention(position: str, backend: str = "sdpa", bug: type[CausalSelfAttention] = CausalSelfAttention):
    """A factory of our CausalSelfAttention (32 wide, 4 heads) with ``position``, or of a bugged subclass."""
    return lambda: bug(32, 4, AttnConfig(backend=backend), position=position)


class PositionsRestartEvery4(GPT):
    """A padded batch's positions restarting every 4 real tokens, as a packed batch of 4-token documents numbers
    them, given rows that are one sequence each."""

    @staticmethod
    def _positions(padding_mask: Tensor, cache=None) -> Tensor:
        return GPT._positions(padding_mask, cache) % 4  # (B, T)


class PositionsCountThePads(GPT):
    """A padded batch's positions counting every column, pads included (Hugging Face's GPT-2 given an attention mask
    and no position_ids): a left-padded row starts at its number of pads."""

    @staticmethod
    def _positions(padding_mask: Tensor, cache=None) -> Tensor:
        before = cache.pos if cache is not None else 0
        return torch.arange(before, before + padding_mask.shape[1]).expand(padding_mask.shape)  # (B, T)


class Decoding(nn.Module):
    """Our GPT (2 layers, 4 heads, 32 wide, context 64, token ids in [0, 50)) with the verifier's interface: forward
    (idx, padding_mask) -> logits, and step(idx_new, cache) -> (logits, cache) decoding with its KV cache: the cached
    step (tinygpt.sampling.generate.CachedStep) for one token, as generate takes it, the modules' cached forward for
    more (a prefill, the verifier's steps of 2, 3 and 16); a bugged subclass's always through its modules."""

    def __init__(self, position: str = "learned", backend: str = "sdpa", attn: type = CausalSelfAttention,
                 gpt: type = GPT):
        super().__init__()
        self.gpt = gpt(GPTConfig(vocab_size=VOCAB, block_size=64, n_layer=2, n_head=4, n_embd=32, position=position,
                                 attn=AttnConfig(backend=backend)))
        if attn is not CausalSelfAttention:
            for block in self.gpt.blocks:
                old = block.attn
                block.attn = attn(32, 4, old.config, bias=False, position=position)
                block.attn.load_state_dict(old.state_dict())

    def forward(self, idx: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        return self.gpt(idx, padding_mask=padding_mask)[0]  # (B, T, V)

    def step(self, idx: Tensor, cache: KVCache | None):
        if cache is None:
            cache = KVCache.for_model(self.gpt, idx.shape[0])
        fast = CachedStep.for_model(self.gpt, cache) if idx.shape[1] == 1 else None
        logits = fast(idx)[:, None] if fast is not None else self.gpt(idx, cache=cache)[0]  # (B, T_new, V)
        return logits, cache


def alibi_function(reverse: bool = False):
    """Our formula as a function (q, k, v, mask) -> out with ALiBi's bias (tinygpt.model.positions), the heads' slopes
    in order or (``reverse``) in reversed order."""
    from tinygpt.model.attention import masked_softmax, scaled_scores
    from tinygpt.model.positions import alibi_bias, alibi_slopes

    def f(q, k, v, mask):
        slopes = torch.tensor(alibi_slopes(q.shape[1]), dtype=q.dtype)  # (H,)
        bias = alibi_bias(slopes.flip(0) if reverse else slopes, torch.arange(k.shape[-2]), q.shape[-2])  # (H, T, T)
        return masked_softmax(scaled_scores(q, k, 1 / math.sqrt(q.shape[-1])) + bias, mask) @ v  # (B, H, T, D)
    return f
