"""The checks of an attention *function* ``(q, k, v, mask) -> out``: q, k, v (B, H, T, D); ``mask`` bool, (T, T)
or (B, 1, T, T), True where query i may attend key j (``mask=hide``: True where it may not); out (B, H, T, D).

Each check compares the function with the formula itself, softmax(q k^T * scale + mask) v, computed in float64 on
the function's inputs: in float64, or in float32 where the function computes in float32 whatever it is given (a
softmax in float32), judged against that precision's rounding (16-bit: against float32 on the same rounded inputs).
Where the function is a known variant of the formula (a sliding window, soft-capped scores) the formula check says
that it does not apply, and padding compares the function with itself; a function declared ``window=W`` is held to
the formula with that window (each query's last W keys, itself included, under causal masks), so a window of another
size fails by name. A function declared ``positions=alibi`` adds
ALiBi's bias itself: the formula is then softmax(q k^T * scale - m_h (i - j) + mask) v with the paper's slopes m_h
(``alibi_slopes``), query i being the last of the keys', under causal masks only (the paper's bias is for the past).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tinygpt.runtime.errors import first_line
from tinygpt.verify.result import Result, VerifyError, WorksIn, described, relative_change, tolerance
from tinygpt.verify.settings import Settings, lengths_tried

B, H, D = 2, 2, 16
FP16_MAX = 65504.0  # float16's largest finite value
CASES = ((1, 16), (5, 8), (33, 16), (33, 64), (128, 8), (128, 64))  # (T, head size): two tiles of 64 keys at 128
CAPS = (5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 100.0)  # soft caps in use (Gemma 2: 50, Grok: 30)


class Function(WorksIn):
    """The user's function, called in the convention it was declared with, on copies of its inputs."""

    def __init__(self, fn, settings: Settings):
        self.fn, self.settings = fn, settings
        self.work = torch.float64  # the precision its checks run in: float32 where it computes in float32

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, keep: Tensor, reseed: bool = True) -> Tensor:
        mask = keep if self.settings.mask == "keep" else ~keep
        if reseed:  # a random function (dropout) draws the same for the inputs compared: the determinism check's
            torch.manual_seed(self.settings.seed)
        try:  # copies: a function that changes its inputs in place (q.mul_(scale)) changes no input of the check's
            out = self.fn(q.clone(), k.clone(), v.clone(), mask.clone())
        except Exception as err:
            raise VerifyError(f"the function called as f(q, k, v, mask) with q, k, v {tuple(q.shape)} and mask "
                              f"{tuple(mask.shape)} raised {described(err)}") from None
        out = out[0] if isinstance(out, (tuple, list)) else out
        if not isinstance(out, Tensor) or out.shape != v.shape:
            got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise VerifyError(f"the function returned {got}; expected out of v's shape (B, H, T, D) = "
                              f"{tuple(v.shape)}.")
        return out

    def scale(self, d: int) -> float:
        return self.settings.scale if self.settings.scale is not None else 1.0 / math.sqrt(d)

    def keep(self, keep: Tensor) -> Tensor:
        """The mask the formula reads for a function given ``keep``: with the declared window, its last W keys too."""
        w = self.settings.window
        return keep & window(keep.shape[-1], w) if w else keep

    @property
    def slopes(self) -> Tensor | None:
        """ALiBi's slopes for the H heads the checks use, when the function declares ALiBi; else None."""
        return alibi_slopes(H) if self.settings.positions == "alibi" else None


def alibi_slopes(n_head: int) -> Tensor:
    """Press et al.'s slopes, (H,) float64: 2^(-8h/H), h = 1 .. H, for H a power of 2; otherwise those of the power
    of 2 below H, then every other one of the next power of 2 (the paper's get_slopes)."""
    def power_of_2(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    below = 2 ** int(math.log2(n_head))
    slopes = power_of_2(below) + power_of_2(2 * below)[0::2][: n_head - below]
    return torch.tensor(slopes, dtype=torch.float64)


def formula(q: Tensor, k: Tensor, v: Tensor, keep: Tensor, scale: float, dim: int = -1, cap: float | None = None,
            slopes: Tensor | None = None) -> Tensor:
    """softmax(q k^T * scale + mask) v, as written, in float64 (a row with no visible key gives 0); ``cap``: the
    scores soft-capped first, cap * tanh(scores / cap); ``slopes`` (H,): ALiBi's bias -slopes[h] (i - j) added to
    head h's scores, query i the (T_k - T_q + i)-th key."""
    q, k, v = q.double(), k.double(), v.double()
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, T_q, T_k)
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    if slopes is not None:
        t_q, t_k = scores.shape[-2:]
        distance = torch.arange(t_q)[:, None] + (t_k - t_q) - torch.arange(t_k)[None, :]  # (T_q, T_k): i - j
        scores = scores - slopes[:, None, None] * distance  # (B, H, T_q, T_k)
    weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=dim)  # (B, H, T_q, T_k)
    return weights.nan_to_num(0.0) @ v  # (B, H, T_q, D)


def causal(t: int) -> Tensor:
    return torch.ones(t, t, dtype=torch.bool).tril()  # (T, T), True = may attend


def window(t: int, w: int, both: bool = False) -> Tensor:
    """(T, T): True where key j is among query i's last ``w`` (``both``: within w on either side)."""
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    return (i - j < w) & ((j - i < w) if both else torch.ones((), dtype=torch.bool))


def qkv(gen: torch.Generator, t: int, d: int = D, std: float = 1.0, dtype=torch.float64, b: int = B
        ) -> tuple[Tensor, ...]:
    return tuple((torch.randn(b, H, t, d, generator=gen, dtype=torch.float64) * std).to(dtype)
                 for _ in range(3))  # 3 x (B, H, T, D)


def check_deterministic(f: Function, gen: torch.Generator) -> Result:
    """The same inputs twice give the same output: randomness (dropout applied whatever the caller meant) is named
    as such; the other checks draw the same random numbers for the inputs they compare, so it reads as no leak."""
    q, k, v = qkv(gen, 16, dtype=f.work)
    first, second = f(q, k, v, causal(16), reseed=False), f(q, k, v, causal(16), reseed=False)
    moved = relative_change(second, first)
    if moved > f.tol:
        return Result("deterministic", "fail", f"two calls differ by {moved:.2g}",
                      "the same inputs twice give different outputs: the function is random (dropout applied "
                      "whatever the caller meant?); the other checks reseed before each call, so this is not read "
                      "as a leak.")
    return Result("deterministic", "pass", f"the same inputs twice give the same output ({f.precision})")


def check_formula(f: Function, gen: torch.Generator) -> Result:
    """Equal to the formula under the causal mask, a random mask and no mask, at head sizes 8, 16 and 64 and at
    lengths up to 128 (two tiles of 64 keys: a tiled kernel's rescale between blocks); when it is not, which
    common slip it equals instead, or which variant of the formula it is (then the formula does not apply). With
    ALiBi declared: the formula with the paper's bias, under the causal mask and a random causal one; with a window
    declared: the formula with that window, under the same two masks."""
    cases, worst, where = [], 0.0, None
    alibi, w = f.slopes is not None, f.settings.window
    for t, d in CASES:
        q, k, v = qkv(gen, t, d, std=2.0, dtype=f.work)
        rand = torch.rand(B, 1, t, t, generator=gen) < 0.6
        rand[..., torch.arange(t), torch.randint(0, t, (t,), generator=gen)] = True  # every row sees a key
        if alibi or w:  # the past alone, each row its own key at least
            rand = (rand & causal(t)) | torch.eye(t, dtype=torch.bool)
        everything = torch.ones(t, t, dtype=torch.bool)
        masks = (("causal", causal(t)), ("random", rand)) + ((("all-visible", everything),) if not (alibi or w)
                                                             else ())
        for name, keep in masks:
            out = f(q, k, v, keep)
            cases.append((q, k, v, keep, out, f.scale(d), f.slopes))
            err = relative_change(out, formula(q, k, v, f.keep(keep), f.scale(d), slopes=f.slopes))
            if err > worst:
                worst, where = err, (name, t, d, *cases[-1])
    if worst <= f.tol:
        masks = ("causal and random causal masks" + (", ALiBi's bias" if alibi else "")
                 + (f", each query's last {w} keys" if w else "")) if alibi or w else "causal, random and no mask"
        return Result("formula", "pass", f"max relative error {worst:.1e} ({f.precision}; {masks}; T up to 128, head "
                                         "sizes 8, 16, 64)")
    variant = variant_of(cases, f.tol)
    if w:  # declared: a window of another size is the finding (transformers#39408: W + 1 keys for W)
        return Result("formula", "fail", f"max relative error {worst:.2g} from the formula with a window of {w}",
                      f"differs from softmax(q k^T * scale + mask) v with each query's last {w} keys (the declared "
                      f"window, itself included)" + (f"; it is {variant}" if variant else "") + ".")
    if variant:
        size = ("; its size is its author's to check, or --window W declares it and the formula check holds the "
                "function to it") if variant.startswith("a sliding window") else ""
        return Result("formula", "n/a", f"max relative error {worst:.2g} from the plain formula",
                      f"does not apply: the function is not the plain formula but {variant} (equal to it on every "
                      f"input tried{size}); the other checks still do, padding against the function itself.")
    name, t, d, q, k, v, keep, out, scale, slopes = where
    bias = " - m_h (i - j)" if alibi else ""
    return Result("formula", "fail", f"max relative error {worst:.2g}",
                  f"differs from softmax(q k^T * {scale:.4g}{bias} + mask) v under the {name} mask at T={t}, head "
                  f"size {d}" + slip(out, q, k, v, keep, scale, d, slopes) + ".")


def variant_of(cases, tol: float) -> str:
    """'the formula with a sliding window of 4 keys' (or soft-capped scores) when one such variant equals the
    function on every case tried; '' when none does."""
    def fits(**variant) -> bool:
        for q, k, v, keep, out, scale, slopes in cases:
            t = q.shape[-2]
            w = variant.get("w")
            mask = keep & window(t, w, variant["both"]) if w else keep
            if relative_change(out, formula(q, k, v, mask, scale, cap=variant.get("cap"), slopes=slopes)) > max(
                    tol, 1e-9):
                return False
        return True

    longest = max(cases, key=lambda c: c[0].shape[-2])
    q, k, v, keep, out, scale, slopes = longest
    t = q.shape[-2]
    for w in range(1, t):  # the window from the longest case alone, then confirmed on every case
        if relative_change(out, formula(q, k, v, keep & window(t, w, True), scale, slopes=slopes)) <= max(tol, 1e-9):
            for both in (False, True):
                if fits(w=w, both=both):
                    side = f"the keys less than {w} away on either side" if both else f"each query's last {w}"
                    return f"a sliding window ({side}, itself included)"
            break
    for cap in CAPS:
        if fits(cap=cap, both=False):
            return f"the scores soft-capped at {cap:g} ({cap:g} * tanh(scores / {cap:g})) before the softmax"
    return ""


def slip(out: Tensor, q: Tensor, k: Tensor, v: Tensor, keep: Tensor, scale: float, d: int,
         slopes: Tensor | None = None) -> str:
    """', and equals it with <the slip>' when the output is one of the common slips' (empty when none fits)."""
    t = q.shape[-2]
    everything = torch.ones(t, t, dtype=torch.bool)
    others = {
        "the scale applied twice": formula(q, k, v, keep, scale * scale, slopes=slopes),  # 1/d_k for 1/sqrt(d_k)
        "no scale": formula(q, k, v, keep, 1.0, slopes=slopes),
        "the softmax over the queries (dim -2) instead of the keys": formula(q, k, v, keep, scale, dim=-2,
                                                                             slopes=slopes),
        "the mask ignored": formula(q, k, v, everything, scale, slopes=slopes),
        "the mask's meaning inverted (True read as hidden)": formula(q, k, v, ~keep, scale, slopes=slopes),
    }
    others.update({f"a fixed scale 1/{n:g}, right only at head size {n * n:g}": formula(q, k, v, keep, 1 / n,
                                                                                        slopes=slopes)
                   for n in (2.0, 4.0, 8.0, 16.0) if n * n != d})
    if slopes is not None:  # ALiBi's own slips: attention-gym#86's sign, the heads' order, the bias never added
        others.update({"ALiBi's slopes in reversed head order": formula(q, k, v, keep, scale, slopes=slopes.flip(0)),
                       "ALiBi's slopes of the wrong sign (farther keys favoured)": formula(q, k, v, keep, scale,
                                                                                           slopes=-slopes),
                       "no ALiBi bias": formula(q, k, v, keep, scale)})
    for name, other in others.items():
        if relative_change(out, other) <= 1e-5:
            return f"; it equals the formula with {name}"
    return ""


def leak(f: Function, t: int, std: float, gen: torch.Generator, dtype) -> tuple[int, int, float] | None:
    """(cut, position, amount): the first past output that moved when the keys and values from ``cut`` on changed,
    under the causal mask at length ``t``; None when none did. The cuts go in one batched call (each confirmed
    alone before it is reported: a function that mixes the batch is the batch check's finding)."""
    q, k, v = qkv(gen, t, std=std, dtype=dtype, b=1)
    base = f(q, k, v, causal(t))
    limit = tolerance(dtype) * float(base.double().abs().max())
    cuts = list(range(1, t))
    per_call = max(1, 4096 // t)
    for start in range(0, len(cuts), per_call):
        chunk = cuts[start : start + per_call]
        k2, v2 = k.repeat(len(chunk), 1, 1, 1), v.repeat(len(chunk), 1, 1, 1)  # (cuts, H, T, D)
        for n, cut in enumerate(chunk):
            for x in (k2, v2):
                x[n, :, cut:] = (torch.randn(x[n, :, cut:].shape, generator=gen, dtype=torch.float64) * std).to(dtype)
        out = f(q.repeat(len(chunk), 1, 1, 1), k2, v2, causal(t))
        for n, cut in enumerate(chunk):
            rows = slice(n, n + 1)
            if moved_beyond(out[rows], base, cut, limit) is None:
                continue
            alone = moved_beyond(f(q, k2[rows], v2[rows], causal(t)), base, cut, limit)
            if alone is not None:
                return (cut, *alone)
    return None


def moved_beyond(out: Tensor, base: Tensor, cut: int, limit: float) -> tuple[int, float] | None:
    """(position, amount) of the first output before ``cut`` that moved past ``limit`` (non-finite counts)."""
    moved = (out[..., :cut, :].double() - base[..., :cut, :].double()).abs().nan_to_num(float("inf"))
    moved = moved.amax(dim=(0, 1, 3))  # (cut,)
    if (moved <= limit).all():
        return None
    i = int(torch.nonzero(~(moved <= limit))[0])
    return i, float(moved[i])


def check_causality(f: Function, gen: torch.Generator) -> Result:
    """Under the causal mask, no query's output moves when the keys and values after it change: every cut, at every
    length from 2 to 64, random ones up to max_len and max_len itself, at ordinary scores and at scores of about
    1e6 (where a finite fill such as -1e4 is outgrown); then in float16 and bfloat16 at a few lengths, where a leak
    confined to the 16-bit path is a leak."""
    tried = lengths_tried(f.settings.max_len, f.settings.seed)
    anchors = [t for t in (2, 8, 33) if t < f.settings.max_len] + [f.settings.max_len]
    for t in tried:
        for std in (1.0, 1e3) if t in anchors else (1.0,):  # a fill that large scores outgrow shows at any length
            found = leak(f, t, std, gen, f.work)
            if found:
                cut, i, amount = found
                fill = "" if std == 1.0 else ("; at ordinary scores it does: a finite fill (such as -1e4) that "
                                              "large scores outgrow, where -inf never is")
                return Result("causality", "fail", f"position {i} moved by {amount:.2g}",
                              f"at T={t}, changing the keys and values from position {cut} on moved the output at "
                              f"position {i} (q, k, v of std {std:g}): the causal mask does not hide later "
                              f"keys{fill}.")
    low = [t for t in (2, 8, 33) if t <= f.settings.max_len]
    for dtype in (torch.float16, torch.bfloat16):
        for t in low:
            try:
                found = leak(f, t, 1.0, gen, dtype)
            except VerifyError:
                break  # a function that raises in 16 bits: the 16-bit check's finding
            if found:
                cut, i, amount = found
                return Result("causality", "fail", f"{dtype_name(dtype)}: position {i} moved by {amount:.2g}",
                              f"in {dtype_name(dtype)}, at T={t}, changing the keys and values from position {cut} "
                              f"on moved the output at position {i}: the causal mask does not hide later keys on "
                              "the 16-bit path (it does in float32 and float64).")
    return Result("causality", "pass", f"no past output moved, every cut at {len(tried)} lengths (2-"
                                       f"{min(64, max(tried))} all, up to {max(tried)}; {f.precision}; float16 and "
                                       f"bfloat16 at T={', '.join(map(str, low))})")


def check_padding(f: Function, gen: torch.Generator) -> Result:
    """Padded keys are invisible, rows whose every key is masked stay finite, the real rows equal the formula (or,
    for a function that is not the plain formula, the function itself on the unpadded sequences)."""
    t = 12
    q, k, v = qkv(gen, t, dtype=f.work)
    real = torch.ones(B, t, dtype=torch.bool)
    real[0, :4] = False  # left padding: queries 0-3 of sequence 0 see no real key (all masked under causality)
    real[1, -3:] = False
    keep = causal(t) & real[:, None, None, :]  # (B, 1, T, T)
    out = f(q, k, v, keep)
    if not torch.isfinite(out).all():
        return Result("padding", "fail", f"{int((~torch.isfinite(out)).sum())} non-finite outputs",
                      "a query whose every key is masked (left padding) gives a non-finite output (the usual guard: "
                      "fill the scores with -inf, then give the rows that have no visible key zeros).")
    padded = (~real)[:, None, :, None].expand_as(k)  # (B, H, T, D): the padded positions' keys and values
    k2 = torch.where(padded, torch.randn(k.shape, generator=gen, dtype=torch.float64).to(k.dtype), k)
    v2 = torch.where(padded, torch.randn(v.shape, generator=gen, dtype=torch.float64).to(v.dtype), v)
    seen = keep.any(-1).expand(B, H, t)  # (B, H, T): the rows that see a real key
    moved = float((f(q, k2, v2, keep) - out).double().abs()[seen].max())
    if moved > f.tol * float(out.double().abs().max()):
        return Result("padding", "fail", f"real outputs moved by {moved:.2g}",
                      "changing the padded keys and values moved a real query's output: padded keys are visible.")
    err = relative_change(out[seen], formula(q, k, v, f.keep(keep), f.scale(q.shape[-1]), slopes=f.slopes)[seen])
    filled = float(out[~seen].abs().max())  # the rows that see no real key (sequence 0's first 4)
    if err <= f.tol:
        return Result("padding", "pass", f"padded keys invisible; all-masked rows finite (max |out| {filled:.2g}); "
                                         f"real rows = the formula ({f.precision})")
    own = max(relative_change(out[b : b + 1, :, span], f(*(x[b : b + 1, :, span] for x in (q, k, v)),
                                                           causal(span.stop - span.start)))
              for b, span in ((0, slice(4, t)), (1, slice(0, t - 3))))
    if own > f.tol:
        return Result("padding", "fail", f"relative error {err:.2g} (formula), {own:.2g} (itself)",
                      "under a padding mask the real rows differ from the formula, and from the function itself on "
                      "the same sequences unpadded.")
    return Result("padding", "pass", f"padded keys invisible; all-masked rows finite; real rows = the function on "
                                     f"the unpadded sequences ({f.precision}; it is not the plain formula, error "
                                     f"{err:.2g} from it)")


def check_batch(f: Function, gen: torch.Generator) -> Result:
    """One sequence's output does not depend on its neighbours in the batch, before or after it."""
    t = 16
    q, k, v = (x.repeat(2, 1, 1, 1) for x in qkv(gen, t, dtype=f.work))  # B = 4
    base = f(q, k, v, causal(t))
    q2, k2, v2 = (x.clone() for x in (q, k, v))
    for x in (q2, k2, v2):
        x[1] = torch.randn(x[1].shape, generator=gen, dtype=torch.float64).to(x.dtype)
    moved = relative_change(f(q2, k2, v2, causal(t))[[0, 2, 3]], base[[0, 2, 3]])
    if moved > f.tol:
        return Result("batch", "fail", f"neighbours moved by {moved:.2g}",
                      "changing sequence 1 of the batch moved the others' outputs: sequences are mixed.")
    return Result("batch", "pass", f"no neighbour moved ({f.precision})")


def check_gradients(f: Function, gen: torch.Generator) -> Result:
    """torch.autograd.gradcheck under the causal mask (float64 inputs; a function that computes in float32 with a
    step and tolerances its rounding allows), and finite gradients where a row has no visible key (the NaN that
    -inf fills give in the backward pass)."""
    q, k, v = (x[:1, :1, :4, :3].clone().requires_grad_() for x in qkv(gen, 4))  # (1, 1, 4, 3) each
    steps = {"eps": 1e-6, "atol": 1e-5} if f.work == torch.float64 else {"eps": 1e-3, "atol": 1e-3, "rtol": 1e-2}
    try:
        torch.autograd.gradcheck(lambda a, b, c: f(a, b, c, causal(4)), (q, k, v), **steps)
    except Exception as err:  # gradcheck's GradcheckError, or a backward that raises
        return Result("gradients", "fail", "gradcheck failed",
                      f"gradcheck ({', '.join(f'{n} {x:g}' for n, x in steps.items())}): {first_line(err)}")
    q, k, v = (x.clone().requires_grad_() for x in qkv(gen, 6, dtype=f.work))
    keep = causal(6) & torch.tensor([False, True, True, True, True, True])[None, None, None, :]  # row 0 sees nothing
    (f(q, k, v, keep) * torch.randn(B, H, 6, D, generator=gen, dtype=torch.float64).to(f.work)).sum().backward()
    bad = sum(int((~torch.isfinite(x.grad)).sum()) for x in (q, k, v) if x.grad is not None)
    if bad:
        return Result("gradients", "fail", f"{bad} non-finite gradients",
                      "with a row whose every key is masked, the backward pass gives non-finite gradients.")
    return Result("gradients", "pass", f"gradcheck passes ({', '.join(f'{n} {x:g}' for n, x in steps.items())}); "
                                       f"finite with an all-masked row ({f.precision})")


def check_16bit(f: Function, gen: torch.Generator) -> Result:
    """float16 and bfloat16 outputs finite and close to the function's own float32 output on the same rounded inputs,
    at ordinary scores and
    at scores whose unscaled product q.k passes float16's largest value while the scaled scores do not."""
    d, t = 64, 32
    tolerance = {torch.float16: 1e-2, torch.bfloat16: 5e-2}
    worst = {}
    for dtype, tol in tolerance.items():
        for std in (1.0, 50.0):  # 50: the diagonal q.q reaches ~1.6e5 unscaled, ~2e4 after 1/sqrt(64)
            q = torch.randn(B, H, t, d, generator=gen) * std
            k = q.clone()  # each query's own key scores highest: a clear, tie-free softmax
            v = torch.randn(B, H, t, d, generator=gen)
            q, k, v = (x.to(dtype) for x in (q, k, v))
            keep = causal(t)
            try:
                out = f(q, k, v, keep).float()
            except VerifyError as err:
                return Result("16-bit", verdict(f.settings), f"{dtype_name(dtype)} raised", str(err))
            ref = f(q.float(), k.float(), v.float(), keep).float()  # the same function in float32, same inputs
            if not torch.isfinite(ref).all():
                break  # float32 overflows too: not a 16-bit finding
            err = relative_change(out, ref)
            worst[dtype] = max(worst.get(dtype, 0.0), err)
            if err > tol:
                raw = float((q.float() @ k.float().transpose(-2, -1)).abs().max())
                why = (f"in {dtype_name(dtype)} the output is {'not finite' if math.isinf(err) else 'far from float32'}"
                       f" with q and k of std {std:g}")
                if dtype == torch.float16 and raw > FP16_MAX >= raw * f.scale(d):
                    why += (f": q k^T reaches {raw:.3g} before its scale, past float16's largest {FP16_MAX:g}, though "
                            f"scaled by {f.scale(d):.3g} it would be {raw * f.scale(d):.3g}; a scale applied after the "
                            "product overflows: multiply q by the scale (or q and k by its square root) before the "
                            "product")
                return Result("16-bit", verdict(f.settings), f"{dtype_name(dtype)} relative error {err:.2g}", why + ".")
    return Result("16-bit", "pass", ", ".join(f"{dtype_name(k)} rel. error {v:.1e}" for k, v in worst.items())
                  + " (at q.k past 65504 too)")


def verdict(settings: Settings) -> str:
    return "fail" if settings.strict_16bit else "warn"


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


CHECKS = {
    "deterministic": check_deterministic,
    "formula": check_formula,
    "causality": check_causality,
    "padding": check_padding,
    "batch": check_batch,
    "gradients": check_gradients,
    "16-bit": check_16bit,
}
