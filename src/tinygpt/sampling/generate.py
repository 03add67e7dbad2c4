"""Sampling: the next-token distribution as a pure function, and the decode loop around a model.

``next_token_probs(logits, temperature, top_k)`` = softmax(logits / temperature) restricted to the top_k
largest logits (ties at the k-th value are kept). ``generate`` appends tokens one at a time, feeding the
model at most its last ``block_size`` tokens (its learned positions end there), or every token with
``model.extrapolate`` (RoPE, ALiBi or no positions attend past the trained length).

With ``use_cache=True`` (the default) the prompt is run once and each new token costs one position's
forward pass against the cached keys and values (kv_cache.KVCache). Policy beyond the context: learned
absolute positions cannot slide, so once the sequence is longer than ``block_size`` every step recomputes
the last ``block_size`` tokens, exactly as without the cache (the outputs stay identical); the other positions do
the same unless ``model.extrapolate``, when the cache holds the whole sequence and every token attends to all
before it.

Prompts of different lengths decode together as one left-padded batch (``pad_prompts`` builds it): pass its
``padding_mask`` and each row continues as it would alone (pads are never attended to; positions count real
tokens only).

Two shortcuts keep every token as it was and only save time: after the prompt, each cached token goes through
``CachedStep`` (GPT.forward's arithmetic without the modules' glue; an unpadded batch of a plain GPT), and
top_k=1 takes its token from ``greedy_token`` (no softmax and draw when the largest logit stands alone). The
loop runs with oneDNN off (``_native_kernels``): PyTorch's own GELU, the same function to float rounding, without
oneDNN's setup per call.
"""

from __future__ import annotations

import contextlib
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tinygpt.model.attention import attention, check_padding_mask
from tinygpt.model.positions import RELATIVE
from tinygpt.runtime.internals import any_global_hooks, has_hooks
from tinygpt.sampling.checks import check_sampling


def next_token_probs(logits: Tensor, temperature: float = 1.0, top_k: int | None = None) -> Tensor:
    """logits (B, V) -> probabilities (B, V): softmax(logits / temperature) over the top_k largest logits."""
    check_sampling(temperature, top_k)
    if not torch.isfinite(logits).all():
        raise FloatingPointError("the model gives non-finite logits (it has diverged); nothing to sample.")
    logits = logits / temperature  # (B, V)
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k).values[:, [-1]]  # (B, 1): the k-th largest logit per row
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.softmax(logits, dim=-1)


def pad_prompts(prompts: list[list[int]], pad_id: int = 0, device=None) -> tuple[Tensor, Tensor]:
    """Token id lists of any lengths -> (idx (B, T_max), padding_mask (B, T_max)), left-padded with ``pad_id``
    (True = real token), T_max the longest prompt."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token.")
    longest = max(len(p) for p in prompts)
    idx = torch.full((len(prompts), longest), pad_id, dtype=torch.long, device=device)  # (B, T_max)
    mask = torch.zeros(len(prompts), longest, dtype=torch.bool, device=device)  # (B, T_max)
    for row, p in enumerate(prompts):
        idx[row, longest - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[row, longest - len(p):] = True
    return idx, mask


def check_left_padded(padding_mask: Tensor, idx: Tensor) -> None:
    """One sentence unless padding_mask is a bool (B, T) mask like idx whose rows are pads then real tokens."""
    check_padding_mask(padding_mask, idx.shape[0], idx.shape[-1], axis="T")
    if not bool(padding_mask[:, -1].all()) or bool((padding_mask[:, 1:] < padding_mask[:, :-1]).any()):
        raise ValueError("padding_mask must be left padding: in each row the pads (False) first, then the "
                         "prompt's tokens (True) up to the last position (tinygpt.sampling.generate.pad_prompts).")


@torch.no_grad()
def generate(
    model,
    idx: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    padding_mask: Tensor | None = None,
) -> Tensor:
    """Sample max_new_tokens after idx (B, T) from ``model`` (idx -> (logits, loss)); returns (B, T + new).
    ``padding_mask`` (B, T): left-padded prompts of different lengths (pad_prompts); the pads stay in front."""
    check_sampling(temperature, top_k)
    if padding_mask is not None:
        check_left_padded(padding_mask, idx)
    with _no_autograd(), _native_kernels():  # no autograd bookkeeping; the tokens leave as a plain tensor
        out = _decode(model, idx, max_new_tokens, temperature, top_k, generator, use_cache, padding_mask)
    return out.clone()


_no_autograd = torch.inference_mode  # the decode loop's context (no_grad alone does more bookkeeping per op)


@contextlib.contextmanager
def _native_kernels():
    """PyTorch's own CPU kernels for the decode loop, oneDNN's off: with oneDNN on (PyTorch's default) F.gelu
    runs a oneDNN primitive, whose setup per call costs more than a row's GELU itself (docs/benchmarks.md: the
    lever's row). The same function to float rounding (~1 ulp); every path of the loop (the prompt, the cached
    step, the modules' forward) runs under it, so they still agree bit for bit. ``torch.backends.mkldnn.enabled``
    is process-wide: it is off while the loop runs (a model training in another thread meanwhile would take
    PyTorch's kernels too) and restored after, whatever happens."""
    before = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = before


def _decode(model, idx: Tensor, max_new_tokens: int, temperature: float, top_k: int | None,
            generator: torch.Generator | None, use_cache: bool, padding_mask: Tensor | None) -> Tensor:
    """generate's loop, its arguments checked."""
    from tinygpt.model.kv_cache import KVCache

    block_size = model.config.block_size
    every = model.config.extrapolate  # attend to every token, past block_size too (not learned positions)
    mask = padding_mask  # (B, T + generated so far), or None: every token real
    longest = max(block_size, idx.shape[1] + max_new_tokens) if every else block_size
    cache = KVCache.for_model(model, idx.shape[0], longest) if use_cache and model.config.attn.causal else None
    step = CachedStep.for_model(model, cache) if cache is not None and mask is None else None
    for _ in range(max_new_tokens):
        if cache is not None and idx.shape[1] <= longest:
            new = idx[:, cache.pos:]  # (B, t): the prompt first, then one token per step
            if step is not None and new.shape[1] == 1:
                last = step(new)  # (B, V): the same arithmetic as model(new, cache=cache), less glue
            else:
                pads = {} if mask is None else {"padding_mask": mask[:, cache.pos:]}  # (B, t)
                last = model(new, cache=cache, **pads)[0][:, -1, :]  # (B, V): the last position predicts
        else:  # no cache, a leaky model (no cache is valid) or past the context: recompute the window
            start = 0 if every else max(0, idx.shape[1] - block_size)  # the window: the last block_size tokens
            context = idx[:, start:]  # (B, <=block_size), or every token
            pads = {} if mask is None else {"padding_mask": mask[:, start:]}  # (B, <=block_size)
            last = model(context, **pads)[0][:, -1, :]  # (B, V)
        nxt = greedy_token(last, temperature) if top_k == 1 else None  # (B, 1) or None
        if nxt is None:
            probs = next_token_probs(last, temperature, top_k)  # (B, V)
            nxt = torch.multinomial(probs, num_samples=1, generator=generator)  # (B, 1)
        idx = torch.cat((idx, nxt), dim=1)  # (B, T + 1)
        if mask is not None:
            mask = torch.cat((mask, torch.ones_like(nxt, dtype=torch.bool)), dim=1)  # (B, T + 1)
    return idx


def greedy_token(logits: Tensor, temperature: float = 1.0) -> Tensor | None:
    """The token top_k=1 sampling draws from logits (B, V), as (B, 1), without drawing: when every row's
    largest logit / temperature is finite and strictly above the second largest, softmax over the top 1 is
    exactly one-hot and ``multinomial`` can only return its index. None (sample as usual) otherwise: ties,
    which sampling breaks at random, non-finite logits (next_token_probs names them) or one token."""
    if logits.size(-1) < 2 or not math.isfinite(logits.sum().item()):  # a finite sum: every logit finite
        return None
    top = torch.topk(logits if temperature == 1.0 else logits / temperature, 2)  # (B, 2): as next_token_probs
    for first, second in top.values.tolist():  # scales them
        if not (first > second and math.isfinite(first)):
            return None
    return top.indices[:, :1]  # (B, 1)


class CachedStep:
    """One token per row through a GPT with its KV cache: ``step(new)`` (B, 1) -> logits (B, V), the same
    arithmetic as ``model(new, cache=cache)[0][:, -1]`` (the same kernels on the same rows, so the same bits:
    tests/sampling/test_generate_fast.py), without the modules' glue: no module calls, shape checks or per-layer
    cache views, and each layer's key and value written into the cache with one copy. The attention itself is the
    layer's own: its ``prepare`` at the new token's position (RoPE's offset: the number of tokens cached), then
    tinygpt.model.attention.attention with its AttnConfig, scale and ALiBi's slopes (its ``attend`` less the dropout,
    which is off here), so every attention option and position reaches decoding (tests/model/test_attention_paths.py).
    Decoding one token runs few FLOPs (its products are memory-bound matrix-vector products), so on a small model
    that glue was most of a token's time (docs/benchmarks.md).

    Only for what it copies: a GPT whose classes are tinygpt's own (no subclass overriding a forward, no
    hooks), causal, in eval mode or without dropout, no padding. ``for_model`` returns None otherwise, and
    the decode loop calls the model."""

    def __init__(self, model, cache, layers: list[_Layer]):
        self.model, self.cache, self.layers = model, cache, layers

    @classmethod
    def for_model(cls, model, cache) -> CachedStep | None:
        from tinygpt.model.attention import CausalSelfAttention
        from tinygpt.sampling.fast_linear import FastDecodeLinear, lean_product
        from tinygpt.model.gpt import GPT, MLP, Block

        expected = {GPT: ("forward", "_embed"), Block: ("forward",), MLP: ("forward",),
                    CausalSelfAttention: ("forward", "_heads", "prepare", "prepares", "attend", "alibi",
                                          "weights_of")}
        if not isinstance(model, GPT) or not model.config.attn.causal:
            return None
        for module in model.modules():
            if has_hooks(module):
                return None
            if module.training and ((isinstance(module, nn.Dropout) and module.p > 0)
                                    or (isinstance(module, CausalSelfAttention) and module.dropout > 0)):
                return None  # live dropout: the modules draw it
            if isinstance(module, CausalSelfAttention) and not module.config.causal:
                return None
            if isinstance(module, nn.Linear) and type(module) not in (nn.Linear, FastDecodeLinear):
                return None
            for klass, methods in expected.items():
                if isinstance(module, klass) and (type(module) is not klass or any(m in vars(module)
                                                                                  for m in methods)):
                    return None
        if any_global_hooks():
            return None

        B = cache.kv.shape[2]  # a token per row

        def linear(layer: nn.Linear) -> tuple:  # F.linear or the split, decided and built once, not per token
            return lean_product(layer, B)

        def norm(ln: nn.LayerNorm) -> tuple:
            return ln.normalized_shape, ln.weight, ln.bias, ln.eps

        dtype = model.lm_head.weight.dtype
        layers = [_Layer(cache.kv[i], norm(b.ln_1), linear(b.attn.c_attn), b.attn, linear(b.attn.c_proj),
                         norm(b.ln_2), linear(b.mlp.c_fc), b.mlp.gelu.approximate, linear(b.mlp.c_proj),
                         (b.attn.n_head, b.attn.head_dim), b.attn.prepares(),
                         None if b.attn.slopes is None else b.attn.alibi(b.attn.c_attn.weight.to(dtype)))
                  for i, b in enumerate(model.blocks)]
        return cls(model, cache, layers)

    def __call__(self, idx: Tensor) -> Tensor:
        """idx (B, 1): the next token of each row -> logits (B, V); the cache advances by one."""
        model, cache = self.model, self.cache
        B = idx.shape[0]
        pos = cache.pos
        if pos + 1 > model.config.block_size and not model.config.extrapolate:  # GPT._embed's check, the cache's
            raise ValueError(f"sequence length {pos + 1} exceeds model.block_size={model.config.block_size}.")
        end = cache.end_after(1)
        # (B, C) rows throughout: the products, LayerNorms and GELU see the same rows as on (B, 1, C)
        x = F.embedding(idx[:, 0], model.wte.weight)  # (B, C)
        if model.wpe is not None:
            x = x + model.wpe.weight[pos]  # (B, C): GPT._embed's sum
        # the keys' positions 0 .. pos, read by RoPE and ALiBi (None: not read)
        positions = torch.arange(end, device=idx.device) if model.config.position in RELATIVE else None  # (pos + 1,)
        C = x.shape[-1]
        for layer in self.layers:
            attn = layer.attn  # the layer's CausalSelfAttention: its config and its computation
            f, w, b = layer.qkv
            H, D = layer.heads
            qkv = f(F.layer_norm(x, *layer.ln_1), w, b).view(B, 3, H, 1, D).transpose(0, 1)  # (3, B, H, 1, D)
            q, k = qkv[0], qkv[1]  # (B, H, 1, D), strided as CausalSelfAttention._heads makes them
            kv = layer.kv  # (2, B, H, max_len, D)
            if layer.prepares:  # the options on q and k (qk_norm, RoPE at position pos) before the cache keeps the key
                q, k_seen = attn.prepare(q, k, None if positions is None else positions[pos:])
                kv.narrow(3, pos, 1).copy_(qkv[1:] if k_seen is k else torch.stack((k_seen, qkv[2])))
            else:
                kv.narrow(3, pos, 1).copy_(qkv[1:])  # this token's key and value at once
            keys, values = kv.narrow(3, 0, end).unbind(0)  # (B, H, pos + 1, D) each
            y, _ = attention(q, keys, values, attn.config, scale=attn.scale_factor, positions=positions,
                             slopes=layer.slopes)  # (B, H, 1, D): as attn.attend
            f, w, b = layer.proj
            x = x + f(y.reshape(B, C), w, b)  # (B, H, 1, D) -> (B, C): the heads side by side
            (f1, w1, b1), (f2, w2, b2) = layer.fc, layer.mlp_proj
            x = x + f2(F.gelu(f1(F.layer_norm(x, *layer.ln_2), w1, b1), approximate=layer.approximate), w2, b2)
        cache.advance(1)
        ln_f = model.ln_f
        return F.linear(F.layer_norm(x, ln_f.normalized_shape, ln_f.weight, ln_f.bias, ln_f.eps),
                        model.lm_head.weight, model.lm_head.bias)  # (B, V)


class _Layer(NamedTuple):
    """One block as CachedStep runs it: its cache slice, LayerNorms' arguments, products (F.linear or the split:
    (function, weight, bias)) and its attention module (which carries the AttnConfig and computes with it)."""

    kv: Tensor  # (2, B, H, max_len, D): this layer's keys and values
    ln_1: tuple
    qkv: tuple
    attn: nn.Module
    proj: tuple
    ln_2: tuple
    fc: tuple
    approximate: str
    mlp_proj: tuple
    heads: tuple  # (H, D)
    prepares: bool  # whether attn.prepare changes q or k (qk_norm, RoPE): else skipped, as it would return them
    slopes: Tensor | None  # ALiBi's (H,), in the model's dtype, made once
