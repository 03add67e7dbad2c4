"""Every option of AttnConfig, and every model.position, reaches every path that computes attention
(tinygpt.model.attention.attention): the module's forward on each backend, ``dissect``, decoding's cached step and the
modules' cached forward (against the full forward), and experiment 3's bugged attention given a correct mask. An
option dropped on one path fails here.

The fields come from ``dataclasses.fields(AttnConfig)``: a new option joins by being a field. Its values to try are
``helpers.other_values``: the other choices of the tuple in tinygpt.model.config that holds its default (BACKENDS,
SCALES, ...), the other truth value of a bool, or the field's ``metadata={"example": value}``. An option that changes
what attention computes must change the formula's output here; those that change only how (hf_config.HOW_NOT_WHAT: the
kernel, the initial weights, where the scale is applied) each have their own witness below. The positions come from
config.POSITIONS, each against the same weights without it (rope, alibi) or with the learned table (none).
"""

import copy
import dataclasses
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

import tinygpt.model.config as config_module
from helpers import other_values
from tinygpt.experiments.partial_leaks.bugs import AttentionBug
from tinygpt.model.attention import masked_softmax, route
from tinygpt.model.config import AttnConfig
from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.model.hf_config import HOW_NOT_WHAT
from tinygpt.model.kv_cache import KVCache
from tinygpt.sampling.generate import CachedStep

T, VOCAB = 8, 11


CASES = [(f.name, v) for f in dataclasses.fields(AttnConfig) for v in other_values(f)]
PATHS = ["forward", "probe", "dissect", "cached_step", "cached_forward", "bug"]
FUSED_PATHS = {"forward", "cached_step", "cached_forward"}  # those that take the fused kernel on backend=sdpa


def build(attn: AttnConfig, dtype=torch.float64, seed: int = 0, position: str = "learned") -> GPT:
    """A 2-layer GPT, eval mode, every parameter N(0, 0.5^2): options change its outputs visibly."""
    torch.manual_seed(seed)
    m = GPT(GPTConfig(vocab_size=VOCAB, block_size=T, n_layer=2, n_head=2, n_embd=8, attn=attn,
                      position=position)).to(dtype).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, 0.5)
    return m


def twin(m: GPT, attn: AttnConfig, **model) -> GPT:
    """A GPT with ``attn`` (and the model settings ``model``) and m's weights (those it has)."""
    other = GPT(replace(m.config, attn=attn, **model)).to(next(m.parameters()).dtype).eval()
    other.load_state_dict(m.state_dict(), strict=False)
    return other


def formula(m: GPT, idx):
    """The reference: the module's forward on the formula (backend=math, every option), logits (B, T, V) and each
    layer's weights."""
    ref = twin(m, replace(m.config.attn, backend="math"))  # its position too
    for b in ref.blocks:
        b.attn.keep = []
    with torch.no_grad():
        logits = ref(idx)[0]
    return logits, [b.attn.keep[0]["weights"] for b in ref.blocks], [b.attn.keep[0]["scores"] for b in ref.blocks]


def correct_bug(m: GPT) -> GPT:
    """Experiment 3's BuggyAttention in every layer, given the correct mask: all but the mask is the bug's own."""
    bugged = AttentionBug("replace_fill", fill=-1.0)(copy.deepcopy(m))
    for b in bugged.blocks:
        b.attn.weights_of = masked_softmax  # the correct masked softmax, (scores, mask) -> weights
    return bugged


def run_path(path: str, m: GPT, idx) -> list:
    """What ``path`` computes on idx (B, T), as tensors comparable to ``formula``'s: logits, or weights and scores."""
    with torch.no_grad():
        if path == "forward":
            return [m(idx)[0]]
        if path == "probe":  # a probe keeping q, k, scores and weights (train.probes.diagnostics.keeping_attention)
            for b in m.blocks:
                b.attn.keep = []
            try:
                logits = m(idx)[0]
                return [logits] + [b.attn.keep[0][key] for key in ("weights", "scores") for b in m.blocks]
            finally:
                for b in m.blocks:
                    b.attn.keep = None
        if path == "bug":
            return [correct_bug(m)(idx)[0]]
        if path == "dissect":
            parts = m.dissect_attention(idx)
            return [p["weights"] for p in parts] + [p["logits"] for p in parts]
        cache = KVCache.for_model(m, idx.shape[0])
        step = CachedStep.for_model(m, cache)
        assert step is not None, "the cached step refused a plain causal GPT"
        if path == "cached_step":
            return [torch.stack([step(idx[:, t:t + 1]) for t in range(T)], dim=1)]  # (B, T, V)
        return [torch.cat([m(idx[:, t:t + 1], cache=cache)[0] for t in range(T)], dim=1)]  # (B, T, V)


def expected_of(path: str, logits, weights, scores) -> list:
    return {"dissect": weights + scores, "probe": [logits] + weights + scores}.get(path, [logits])


IDX = torch.randint(0, VOCAB, (2, T), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("name,value", CASES, ids=[f"{n}={v}" for n, v in CASES])
def test_every_option_reaches_every_path(name, value):
    """On each backend the config allows with the option, every path with the option equals the formula with it
    (float64, to 1e-9); for an option that changes what is computed, the formula with it differs from the formula
    without it, so a path that dropped it would fail."""
    tried = 0
    for backend in config_module.BACKENDS:
        try:
            attn = AttnConfig(**{"backend": backend, name: value})
        except ValueError:  # e.g. scale_at=qk with the fused kernel: refused before any run, nothing to drop
            continue
        m = build(attn)
        reference = formula(m, IDX)
        default = (None if name in HOW_NOT_WHAT
                   else formula(twin(m, replace(attn, **{name: getattr(AttnConfig(), name)})), IDX))
        for path in PATHS:
            where = f"model.attn.{name}={value!r} on backend={backend}, path {path}"
            if path.startswith("cached") and not attn.causal:  # a leaky model's cache is invalid: decoding must not
                assert CachedStep.for_model(m, KVCache.for_model(m, 2)) is None, where  # use it
                continue
            got, want = run_path(path, m, IDX), expected_of(path, *reference)
            assert len(got) == len(want), where
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w, rtol=0, atol=1e-9, msg=lambda m, where=where: f"{where}: {m}")
            if default is not None:
                gap = max((g - w).abs().max().item() for g, w in zip(got, expected_of(path, *default), strict=True))
                assert gap > 1e-6, (f"{where}: the formula computes the same without it on this model, so the check "
                                    "has no teeth (give the field an example value that matters)")
            tried += 1
    assert tried, f"model.attn.{name}={value!r} is refused on every backend"


POSITIONS = [p for p in config_module.POSITIONS if p != GPTConfig.position]
WITH = {"causal": AttnConfig(), "qk_norm": AttnConfig(qk_norm=True), "no mask": AttnConfig(causal=False)}


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("attn", WITH.values(), ids=WITH)
def test_every_position_reaches_every_path(position, attn):
    """model.position on each backend, with qk_norm (RoPE rotates after the norm) and without the mask: every path
    equals the formula with it (float64, to 1e-9), and the formula with it differs from the same weights without it
    (rope, alibi against none; none against the learned table)."""
    for backend in config_module.BACKENDS:
        m = build(replace(attn, backend=backend), position=position)
        reference = formula(m, IDX)
        default = formula(twin(m, m.config.attn, position="learned" if position == "none" else "none"), IDX)
        for path in PATHS:
            where = f"model.position={position} on backend={backend}, {attn}, path {path}"
            if path.startswith("cached") and not attn.causal:
                assert CachedStep.for_model(m, KVCache.for_model(m, 2)) is None, where
                continue
            got, want = run_path(path, m, IDX), expected_of(path, *reference)
            assert len(got) == len(want), where
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w, rtol=0, atol=1e-9, msg=lambda m, where=where: f"{where}: {m}")
            gap = max((g - w).abs().max().item() for g, w in zip(got, expected_of(path, *default), strict=True))
            assert gap > 1e-6, f"{where}: the formula computes the same without it"


# ----------------------------------------------------------------------------- the options that change how, not what


def fused_calls(monkeypatch) -> list:
    calls = []
    real = F.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    return calls


@pytest.mark.parametrize("backend", config_module.BACKENDS)
def test_backend_reaches_every_path(backend, monkeypatch):
    """backend=math never calls the fused kernel on any path; backend=sdpa calls it wherever nothing needs the formula
    (the probe and dissect want the weights, the bug its own mask: route says so)."""
    m = build(AttnConfig(backend=backend))
    calls = fused_calls(monkeypatch)
    for path in PATHS:
        calls.clear()
        if path == "dissect":  # GPT.dissect_attention also runs each block forward to reach the next one's input
            with torch.no_grad():
                m.blocks[0].attn.dissect(torch.randn(2, T, 8, dtype=torch.float64))
        else:
            run_path(path, m, IDX)
        assert bool(calls) == (backend == "sdpa" and path in FUSED_PATHS), f"backend={backend}, path {path}"


def test_route_gives_the_reason_when_it_falls_back():
    assert route(AttnConfig()) == ("sdpa", "model.attn.backend=sdpa")
    assert route(AttnConfig(backend="math"))[0] == "math"
    assert "weights" in route(AttnConfig(), need_weights=True)[1]
    assert "own mask" in route(AttnConfig(), own_mask=True)[1]
    m = build(AttnConfig())
    assert m.blocks[0].attn.route() == ("sdpa", "model.attn.backend=sdpa")
    assert correct_bug(m).blocks[0].attn.route()[0] == "math"


def test_scale_at_reaches_every_path():
    """Where q.k overflows float32 and sqrt(scale) q . sqrt(scale) k does not, scale_at=qk gives finite outputs on
    every path and scale_at=scores does not (the check's teeth)."""
    models = {}
    for at in ("qk", "scores"):
        models[at] = build(AttnConfig(backend="math", scale=1e-4, scale_at=at), dtype=torch.float32)
        with torch.no_grad():
            for b in models[at].blocks:  # q and k components ~1e19: their products pass float32's 3.4e38
                b.attn.c_attn.weight[: 2 * 8].normal_(0.0, 1e19)
    for path in PATHS:
        assert all(torch.isfinite(t).all() for t in run_path(path, models["qk"], IDX)), f"{path} ignored scale_at=qk"
        assert not all(torch.isfinite(t).all() for t in run_path(path, models["scores"], IDX)), path


def test_qk_init_is_the_initial_weights():
    """qk_init acts when the GPT is built (model/gpt.py), not in a path: the paths see the weights it gave."""
    torch.manual_seed(0)
    gpt2 = GPT(GPTConfig(vocab_size=VOCAB, block_size=T, n_layer=1, n_head=2, n_embd=8))
    torch.manual_seed(0)
    unit = GPT(GPTConfig(vocab_size=VOCAB, block_size=T, n_layer=1, n_head=2, n_embd=8, attn={"qk_init": "unit"}))
    w_gpt2, w_unit = gpt2.blocks[0].attn.c_attn.weight[:16], unit.blocks[0].attn.c_attn.weight[:16]
    assert w_unit.std().item() == pytest.approx(1 / math.sqrt(8), rel=0.3) and w_gpt2.std().item() < 0.05


def test_each_option_that_changes_how_has_a_witness_here():
    witnesses = {"backend": test_backend_reaches_every_path, "scale_at": test_scale_at_reaches_every_path,
                 "qk_init": test_qk_init_is_the_initial_weights}
    assert set(witnesses) == set(HOW_NOT_WHAT), "a new option in hf_config.HOW_NOT_WHAT needs its witness test here"
