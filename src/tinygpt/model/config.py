"""The model's settings (``model.*``): ``GPTConfig`` and its ``attn: AttnConfig``. Each field is declared here once:
the config's schema is derived from these classes (tinygpt.train.schema); a run's defaults, with their comments, are
configs/model/baby.yaml's, and the defaults here (for use from Python) are the same (tests/train/test_schema.py).
Each class checks its own values on construction, one sentence naming the key. Torch-free, so that the config is
checked before anything heavy is imported.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from numbers import Real
from typing import Any

from tinygpt.runtime.checks import is_number, one_of, positive_int, positive_number

SCALES = ("sqrt_dk", "none", "inv_dk")
BACKENDS = ("sdpa", "math")
QK_INITS = ("gpt2", "unit")
SCALE_AT = ("scores", "qk")
POSITIONS = ("learned", "none", "rope", "alibi")  # model.position: tinygpt.model.positions says what each is
ACTIVATIONS = {"gelu": "none", "gelu_tanh": "tanh"}  # model.activation -> nn.GELU's ``approximate``


def scale_factor(scale: str | float, head_dim: int) -> float:
    """The number the scores are multiplied by: 'sqrt_dk' -> 1/sqrt(d_k), 'none' -> 1.0, 'inv_dk' -> 1/d_k, a positive
    number -> itself. A number <= 0 is refused: torch's fused kernel (backend=sdpa) returns NaN for it, and both
    backends must compute the same function."""
    if isinstance(scale, str):
        try:
            scale = float(scale)
        except ValueError:
            pass
    if isinstance(scale, Real) and not isinstance(scale, bool):
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"model.attn.scale={scale!r} must be a positive number (or sqrt_dk, none, inv_dk).")
        return float(scale)
    if scale == "sqrt_dk":
        return 1.0 / math.sqrt(head_dim)
    if scale == "none":
        return 1.0
    if scale == "inv_dk":
        return 1.0 / head_dim
    raise ValueError(f"model.attn.scale={scale!r} is not one of 'sqrt_dk', 'none', 'inv_dk' or a number.")


def check_heads(n_embd: int, n_head: int) -> int:
    """The head size D = n_embd / n_head, when n_head is a positive integer that divides n_embd; else one sentence
    naming both (as the model.* settings that set them)."""
    positive_int("model.n_head", n_head)
    if n_embd % n_head:
        raise ValueError(f"model.n_embd={n_embd} must be divisible by model.n_head={n_head}.")
    return n_embd // n_head


@dataclass
class AttnConfig:
    """How each attention layer computes softmax(q k^T * scale + mask) v (tinygpt.model.attention)."""

    causal: bool = True
    scale: Any = "sqrt_dk"  # sqrt_dk | none | inv_dk | a number: scale_factor turns it into the float
    backend: str = "sdpa"  # sdpa (fused) | math (the explicit formula)
    qk_norm: bool = False  # LayerNorm on queries and keys per head, before the scale
    qk_init: str = "gpt2"  # gpt2 (W_Q, W_K ~ N(0, 0.02^2)) | unit (q, k components of variance 1 at init)
    scale_at: str = "scores"  # scores (q k^T, then times the scale) | qk (q and k each times sqrt(scale), then q k^T)

    def __post_init__(self):
        one_of("model.attn.backend", self.backend, BACKENDS)
        one_of("model.attn.qk_init", self.qk_init, QK_INITS)
        one_of("model.attn.scale_at", self.scale_at, SCALE_AT)
        if self.scale_at != "scores" and self.backend != "math":
            raise ValueError(f"model.attn.scale_at={self.scale_at!r} places the scale in the explicit formula, "
                             "backend=math; the fused kernel (backend=sdpa) places it itself.")
        scale_factor(self.scale, 1)  # a scale by name or a number; its value needs the head size


@dataclass
class GPTConfig:
    vocab_size: int = 65
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = False
    activation: str = "gelu"  # gelu (exact, erf) | gelu_tanh (GPT-2's tanh approximation, transformers' gelu_new)
    ln_eps: float = 1e-5  # the eps of the blocks' and the final LayerNorm (GPT-2's layer_norm_epsilon)
    position: str = "learned"  # learned (the table wpe) | none | rope (q and k rotated) | alibi (a bias on the scores)
    rope_base: float = 10000.0  # position=rope: pair i of a head turns by p * rope_base^(-2i / d_k) at position p
    extrapolate: bool = False  # past block_size: false slides a window of block_size tokens; true attends to all
    attn: AttnConfig = field(default_factory=AttnConfig)
    # callables applied to the built GPT in order, each a Hydra node (its ``_target_`` and settings), built by the
    # trainer (tinygpt.train.module.build_model): how an experiment reaches inside the model
    patch: list = field(default_factory=list)

    def __post_init__(self):
        if not isinstance(self.attn, AttnConfig):  # a dict or Hydra's DictConfig: checked as the class it is
            self.attn = AttnConfig(**self.attn)
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            positive_int(f"model.{name}", getattr(self, name))
        check_heads(self.n_embd, self.n_head)
        if not is_number(self.dropout) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout={self.dropout!r} must be in [0, 1).")
        one_of("model.activation", self.activation, ACTIVATIONS)
        positive_number("model.ln_eps", self.ln_eps, " (the LayerNorms' eps, e.g. 1e-5)")
        one_of("model.position", self.position, POSITIONS)
        if not is_number(self.rope_base) or self.rope_base <= 1:
            raise ValueError(f"model.rope_base={self.rope_base!r} must be a number greater than 1 (RoPE's angles "
                             "slow from the first pair of dims to the last only then; 10000 is the paper's).")
        if self.position == "rope" and self.head_dim % 2:
            raise ValueError(f"model.position=rope turns pairs of dims, but the head size model.n_embd / model.n_head "
                             f"= {self.head_dim} is odd; give an even one.")
        if self.extrapolate and self.position == "learned":
            raise ValueError("model.extrapolate=true attends past block_size, where model.position=learned has no "
                             "position (its table ends there); use position=rope, alibi or none, or extrapolate=false.")
        if not isinstance(self.patch, (list, tuple)):
            raise ValueError(f"model.patch={self.patch!r} must be a list of callables (Hydra nodes with _target_).")
        self.patch = list(self.patch)

    @property
    def head_dim(self) -> int:
        """d_k, each head's size: n_embd / n_head."""
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)


def patch_names(patch: list) -> str:
    """The patches as a reader names them: ``AttentionBug(kind='off_by_one', layers=[0])``, comma-separated."""
    def name(node) -> str:
        node = dict(node)
        target = str(node.pop("_target_", "?")).rsplit(".", 1)[-1]
        return f"{target}({', '.join(f'{k}={v!r}' for k, v in node.items())})"
    return ", ".join(name(n) for n in patch)


def default_of(dotted: str, missing: Any = None) -> Any:
    """The default of a model setting named from the config's root (``model.position``, ``model.attn.scale_at``),
    from the dataclass that owns it; ``missing`` for any other key (a resume's check: runtime.resume_record)."""
    from dataclasses import MISSING, fields

    owner = {"model": GPTConfig, "model.attn": AttnConfig}.get(dotted.rpartition(".")[0])
    found = next((f for f in fields(owner) if f.name == dotted.rpartition(".")[2]), None) if owner else None
    return missing if found is None or found.default is MISSING else found.default
