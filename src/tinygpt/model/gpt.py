"""The GPT: token (+ learned position) embeddings, n_layer pre-LN blocks, final LN, head tied to the embedding.

``model.position`` says where positions enter (tinygpt.model.positions): ``learned`` adds the table ``wpe`` to the
token embeddings here; ``rope`` and ``alibi`` act inside every attention layer, which the GPT hands each token's
position (per row in a padded batch); ``none`` adds nothing. Past block_size only ``model.extrapolate`` lets the
others run (the learned table ends there)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tinygpt.model.attention import CausalSelfAttention, check_padding_mask
from tinygpt.model.config import ACTIVATIONS, GPTConfig
from tinygpt.model.positions import RELATIVE

INIT_STD = 0.02  # GPT-2's: every Linear and Embedding weight ~ N(0, INIT_STD^2)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU(approximate=ACTIVATIONS[cfg.activation])
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """x + attn(LN(x)), then x + mlp(LN(x))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.ln_eps, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg.n_embd, cfg.n_head, cfg.attn, dropout=cfg.dropout, bias=cfg.bias,
                                        position=cfg.position, rope_base=cfg.rope_base)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.ln_eps, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor, kv_cache=None, padding_mask: Tensor | None = None,
                positions: Tensor | None = None) -> Tensor:
        x = x + self.attn(self.ln_1(x), padding_mask=padding_mask, kv_cache=kv_cache, positions=positions)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd) if cfg.position == "learned" else None
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.ln_eps, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init_weights)
        # GPT-2: residual projections scaled by 1/sqrt(2 * n_layer)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=INIT_STD / math.sqrt(2 * cfg.n_layer))
        if cfg.attn.qk_init == "unit":  # Vaswani's premise: LN(x) has unit-variance components, so
            for block in self.blocks:  # W ~ N(0, 1/C) gives q and k components of variance 1 at init
                nn.init.normal_(block.attn.c_attn.weight[: 2 * cfg.n_embd], std=1.0 / math.sqrt(cfg.n_embd))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)

    def num_params(self, non_embedding: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())  # tied weights are counted once
        return n - self.wpe.weight.numel() if non_embedding and self.wpe is not None else n

    def flops_per_token(self) -> float:
        """Training FLOPs per token (forward + backward), as nanoGPT and the PaLM paper count them:
        6 per weight plus the attention matmuls, 12 * n_layer * n_embd * block_size."""
        c = self.config
        return 6.0 * self.num_params() + 12.0 * c.n_layer * c.n_embd * c.block_size

    def _embed(self, idx: Tensor, start: int = 0, positions: Tensor | None = None) -> Tensor:
        """idx (B, T) -> token + learned position embeddings, (B, T, C): at positions start .. start + T - 1, or at
        ``positions`` (B, T) per row (a padded batch); the token embeddings alone for the other model.position."""
        T = idx.shape[1]
        if start + T > self.config.block_size and not self.config.extrapolate:
            raise ValueError(f"sequence length {start + T} exceeds model.block_size={self.config.block_size}"
                             + ("." if self.wpe is not None else " (model.extrapolate=true attends past it)."))
        if self.wpe is None:
            return self.drop(self.wte(idx))  # (B, T, C)
        if positions is None:
            positions = torch.arange(start, start + T, device=idx.device)  # (T,)
        return self.drop(self.wte(idx) + self.wpe(positions))  # (B, T, C)

    def forward(
        self, idx: Tensor, targets: Tensor | None = None, *, cache=None, padding_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """idx (B, T) -> (logits (B, T, V), mean cross-entropy against targets (B, T) or None).

        ``cache`` (a kv_cache.KVCache): idx holds the tokens after the ``cache.pos`` already cached; they
        get positions cache.pos .. cache.pos + T - 1 and the cache advances by T.
        ``padding_mask`` (B, T) bool, True = real token: a batch of left-padded sequences (each row's real
        tokens last). No token attends to a pad, and a row's positions count its real tokens only (the learned
        table's, RoPE's angles and ALiBi's distances alike), so each row is computed as it would be alone (the pads'
        own outputs are meaningless). With a cache, the cache remembers the mask of what it holds.
        """
        B, T = idx.shape
        padded = padding_mask is not None or (cache is not None and cache.padded)
        if padded and padding_mask is None:  # new tokens after a padded prompt: all real
            padding_mask = torch.ones(B, T, dtype=torch.bool, device=idx.device)
        check_padding_mask(padding_mask, B, T, axis="T")
        positions = self._positions(padding_mask, cache) if padded else None  # (B, T) or None: in order
        x = self._embed(idx, cache.pos if cache is not None else 0, positions)  # (B, T, C)
        keys_mask = None  # (B, T_k): which keys hold real tokens, None when all do
        key_positions = None  # (B, T_k): each key's position in its row; None: 0 .. T_k - 1 in every row
        if padded:
            keys_mask = cache.extend_mask(padding_mask) if cache is not None else padding_mask
            key_positions = self._positions(keys_mask) if self.config.position in RELATIVE else None
        for i, block in enumerate(self.blocks):
            x = block(x, kv_cache=cache.layer(i) if cache is not None else None, padding_mask=keys_mask,
                      positions=key_positions)
        if cache is not None:
            cache.advance(T)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))  # (B*T, V)
        return logits, loss

    @staticmethod
    def _positions(padding_mask: Tensor, cache=None) -> Tensor:
        """Each token's position in a left-padded batch: how many real tokens precede it in its row (the cached
        ones included), (B, T); pads get 0 (nothing attends to them)."""
        before = cache.real_tokens()[:, None] if cache is not None else 0  # (B, 1): real tokens cached
        return (before + padding_mask.cumsum(dim=1) - 1).clamp_min(0)  # (B, T)

    def dissect_attention(self, idx: Tensor) -> list[dict[str, Tensor]]:
        """The opt-in look inside: run idx (B, T) through the model and return, per layer, its attention's
        ``dissect`` (weights, logits, q, k on the math path) on that layer's actual input."""
        x = self._embed(idx)  # (B, T, C)
        out = []
        for block in self.blocks:
            out.append(block.attn.dissect(block.ln_1(x)))
            x = block(x)
        return out
