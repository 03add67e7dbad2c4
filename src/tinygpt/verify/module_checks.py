"""The checks of an attention *module* ``x -> y``: x (B, T, C) (or token ids (B, T) with ``vocab``), y (B, T, ...).
Its math is not visible from outside, so these check its behaviour: the future never moves the past, each position
sees itself and its past, sequences do not mix, padding (where the module takes a mask), the KV cache (where it
has one), gradients and 16-bit. Everything but the 16-bit check runs on a copy in eval mode, in float64, or in
float32 where the module computes in float32 whatever it is given (a softmax in float32: result.computes_in), each
judged against its precision's rounding.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from tinygpt.verify.result import Result, VerifyError, WorksIn, described, relative_change, tell
from tinygpt.verify.settings import Settings, lengths_tried

FP16_MAX = 65504.0  # float16's largest finite value
SCALES = (1.0, 1e4)  # input scales: ordinary, and large enough that scores outgrow a finite fill such as -1e4


class Module(WorksIn):
    """The user's module, called as module(x) (and module(x, <padding>=mask)), its output's first element taken
    when it returns a tuple."""

    def __init__(self, module: nn.Module, width: int, settings: Settings, work: torch.dtype = torch.float64):
        self.module, self.width, self.settings = module.eval(), width, settings
        self.work = work  # the precision the checks run in: float64, or float32 where the module computes in it
        self.name = type(module).__name__

    def copy(self, dtype: torch.dtype | None = None) -> Module:
        """A copy in ``dtype`` (default: the precision the checks run in), its inputs made in that dtype."""
        return Module(copy.deepcopy(self.module).to(dtype or self.work), self.width, self.settings, dtype or self.work)

    def inputs(self, gen: torch.Generator, b: int, t: int, scale: float = 1.0, dtype=None) -> Tensor:
        dtype = dtype or self.work
        if self.settings.vocab:
            return torch.randint(0, self.settings.vocab, (b, t), generator=gen)  # (B, T) token ids
        return torch.randn(b, t, self.width, generator=gen, dtype=dtype) * scale  # (B, T, C)

    def fresh(self, x: Tensor, gen: torch.Generator, scale: float = 1.0) -> Tensor:
        """New values of x's shape and kind (other tokens, or other vectors of the same scale)."""
        if self.settings.vocab:
            return (x + torch.randint(1, self.settings.vocab, x.shape, generator=gen)) % self.settings.vocab
        return torch.randn(x.shape, generator=gen, dtype=x.dtype) * scale

    def __call__(self, x: Tensor, grad: bool = False, reseed: bool = True, **kwargs) -> Tensor:
        if reseed:  # dropout (on in train mode, or left on in eval) draws the same masks for inputs of one shape
            torch.manual_seed(self.settings.seed)
        try:
            with torch.set_grad_enabled(grad):  # copies: a module that changes its input in place (x += pos) is
                y = self.module(x.clone(), **{k: v.clone() if isinstance(v, Tensor) else v  # not a leak
                                              for k, v in kwargs.items()})
        except Exception as err:
            what = "token ids" if self.settings.vocab else "x"
            shapes = any(w in str(err) for w in ("mat1 and mat2", "normalized_shape", "size of tensor a"))
            hint = f" (is its input width {self.width}? give --width)" if shapes and not self.settings.vocab else ""
            if isinstance(err, TypeError) and "required positional argument" in str(err) and not kwargs:
                hint = ("; the checks call forward(x) with one tensor: wrap a module that takes query, key and value "
                        "(nn.MultiheadAttention) in one whose forward(x) calls it as self-attention, e.g. "
                        "module(x, x, x, attn_mask=mask)[0]")
            raise VerifyError(f"{self.name}'s forward with {what} of shape {tuple(x.shape)} in {dtype_of(x)}"
                              f"{' and ' + ', '.join(kwargs) if kwargs else ''} raised "
                              f"{described(err).rstrip('.')}{hint if x.shape[1] == 1 or hint.startswith(';') else ''}"
                              ".") from None
        y = first_of(y)
        if not isinstance(y, Tensor) or y.shape[:2] != x.shape[:2]:
            got = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
            raise VerifyError(f"{self.name} returned {got} for input {tuple(x.shape)}; expected (B, T, ...) = "
                              f"{tuple(x.shape[:2])} first.")
        return y

    def longest(self, gen: torch.Generator) -> tuple[int, str]:
        """The longest length up to max_len the module takes (and why it stopped there, when it did)."""
        try:
            self(self.inputs(gen, 1, self.settings.max_len))
            return self.settings.max_len, ""
        except VerifyError as err:
            low, high = 1, self.settings.max_len  # low works (checked by the first call), high does not
            while high - low > 1:
                mid = (low + high) // 2
                try:
                    self(self.inputs(gen, 1, mid))
                    low = mid
                except VerifyError:
                    high = mid
            return low, f" (it refuses T={high}: {str(err).split(' raised ', 1)[-1]})"


def check_interfaces(module: nn.Module, settings: Settings) -> None:
    """The padding keyword and the cache method named exist, before any check runs (one sentence when not)."""
    import inspect

    name = type(module).__name__
    if settings.padding:
        params = inspect.signature(module.forward).parameters
        if settings.padding not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            raise VerifyError(f"{name}.forward has no keyword {settings.padding} (it takes {', '.join(params)}): "
                              "padding names the keyword of its (B, T) bool mask, True = real token.")
    if settings.kv_cache and not callable(getattr(module, settings.kv_cache, None)):
        raise VerifyError(f"{name} has no method {settings.kv_cache}: kv_cache names a method step(x_new, cache) -> "
                          "(y_new, cache), cache None at first.")


def dtype_of(x: Tensor) -> str:
    return "token ids" if not x.is_floating_point() else str(x.dtype).removeprefix("torch.")


def first_of(y):
    """A module's output: the tensor itself, a tuple's first element, or a ModelOutput's or dict's first field
    (transformers' last_hidden_state, logits)."""
    if hasattr(y, "to_tuple"):
        y = y.to_tuple()
    elif isinstance(y, dict):
        y = tuple(y.values())
    return y[0] if isinstance(y, (tuple, list)) and y else y


class NoDropout(TorchFunctionMode):
    """Dropout off while a module runs (its train-mode path otherwise kept): the causality check sends the cuts of
    one length in one batched call, whose rows would draw different dropout masks."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in DROPOUTS:
            return args[0] if args else kwargs["input"]
        if func is F.scaled_dot_product_attention:
            args, kwargs = args[:4], {**kwargs, "dropout_p": 0.0}
        elif func is F.multi_head_attention_forward:
            args, kwargs = args, {**kwargs, "training": False}
        return func(*args, **kwargs)


DROPOUTS = {F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout, F.feature_alpha_dropout, torch.dropout}
CELLS = 2**19  # (cut, T, T) score cells per batched call of the causality check: tens of MB at most
ANNOUNCE_FROM = 256  # a causality check up to this length or beyond says what it will cost before it starts


def leak(m: Module, t: int, scale: float, gen: torch.Generator) -> tuple[int, int, float, Tensor, Tensor] | None:
    """(cut, position, amount, x, x2): the first past output that moved when the tokens from ``cut`` on changed, at
    length ``t``; None when none did. The cuts go in batched calls (each confirmed alone before it is reported: a
    module that mixes the batch is the batch check's finding, not a leak)."""
    x = m.inputs(gen, 2, t, scale)
    base = m(x)
    limit = m.tol * finite_max(base)
    cuts = list(range(1, t))
    per_call = max(1, CELLS // (t * t))
    start = 0
    while start < len(cuts):
        chunk = cuts[start : start + per_call]
        xs = x.repeat(len(chunk), *([1] * (x.dim() - 1)))  # (2 * cuts, T, ...)
        for n, cut in enumerate(chunk):
            xs[2 * n : 2 * n + 2, cut:] = m.fresh(xs[2 * n : 2 * n + 2, cut:], gen, scale)
        try:
            ys = m(xs) if len(chunk) > 1 else None
        except VerifyError:  # a module that takes a batch of 2 only (a cache sized for it): one cut at a time
            per_call, ys = 1, None
        for n, cut in enumerate(chunk):
            x2 = xs[2 * n : 2 * n + 2]
            if ys is not None and past_moved(ys[2 * n : 2 * n + 2], base, cut, limit) is None:
                continue
            alone = past_moved(m(x2), base, cut, limit)
            if alone is not None:
                return cut, *alone, x, x2
        start += len(chunk)
    return None


def past_moved(y: Tensor, base: Tensor, cut: int, limit) -> tuple[int, float] | None:
    """(position, amount) of the first output before ``cut`` that moved past ``limit`` (non-finite counts)."""
    moved = change(y[:, :cut], base[:, :cut]).flatten(2).amax(dim=(0, 2))  # (cut,)
    if (moved <= limit).all():
        return None
    i = int(torch.nonzero(~(moved <= limit))[0])
    return i, float(moved[i])


def check_deterministic(m: Module, gen: torch.Generator) -> Result:
    """The same input twice in eval mode gives the same output: randomness (dropout left on in eval) is named as
    randomness; the other checks reseed before each call, so it is not read as a leak or as batch mixing."""
    m64 = m.copy()
    x = m64.inputs(gen, 2, min(16, m.settings.max_len))
    first, second = m64(x, reseed=False), m64(x, reseed=False)
    moved = relative_change(second, first)
    if moved > m.tol:
        return Result("deterministic", "fail", f"two calls differ by {moved:.2g}",
                      f"the same input twice in eval mode gives different outputs: {m.name} is random in eval mode "
                      "(dropout left on: a dropout_p or F.dropout that ignores self.training?); the other checks "
                      "reseed before each call, so this is not read as a leak.")
    return Result("deterministic", "pass", f"the same input twice gives the same output ({m.precision})")


def check_causality(m: Module, gen: torch.Generator) -> Result:
    """Changing every token after a cut leaves every output before it unchanged, for every cut: in eval mode at every
    length from 2 to 64, random ones up to the longest the module takes and that longest, at an ordinary input
    scale (and a large one at lengths 2, 8, 33 and the longest, where a finite fill is outgrown); in train mode
    (dropout off: a training path of its own) at those four; then float16 and bfloat16 copies at 2, 8 and 33, where
    a leak confined to the 16-bit path is a leak. On a leak, the submodule whose past output first moved is named:
    where the leak enters a stacked model."""
    m64 = m.copy()
    longest, stopped = m64.longest(gen)
    tried = lengths_tried(longest, m.settings.seed)
    anchors = sorted({t for t in (2, 8, 33) if t < longest} | {longest})
    scales = SCALES if not m.settings.vocab else (1.0,)
    plan = [("eval", t, s, m64) for t in tried for s in (scales if t in anchors else (1.0,))]
    plan += [("train", t, s, m64) for t in anchors for s in scales]
    low = [t for t in (2, 8, 33) if t <= longest]
    plan += [(str(d).removeprefix("torch."), t, 1.0, d) for d in (torch.float16, torch.bfloat16) for t in low]
    announce(m64, plan, longest)
    skipped = ""
    with NoDropout():
        for n, (mode, t, scale, which) in enumerate(plan):
            tell(f"causality: {mode}, T={t} ({n + 1} of {len(plan)})")
            if not isinstance(which, Module):  # a 16-bit copy, in eval mode
                try:
                    which = m.copy(which)
                    which.module.eval()
                    found = leak(which, t, scale, gen)
                except VerifyError:
                    skipped = f"; {mode} skipped: it raises there (the 16-bit check says where)"
                    continue
            else:
                which.module.train(mode == "train")
                found = leak(which, t, scale, gen)
            if found:
                cut, i, amount, x, x2 = found
                later = spans(seen_later(which, x, i, gen, scale))
                work = str(m.work).removeprefix("torch.")
                where = (f"{mode} mode" if mode in ("eval", "train") else f"in {mode}, eval mode; in {work} it is "
                         "causal: the leak is on the 16-bit path")
                return Result("causality", "fail", f"position {i} moved by {amount:.2g}",
                              f"at T={t}, changing the tokens from position {cut} on moved the output at "
                              f"position {i} (input scale {scale:g}, {where}): position {i} sees "
                              f"{later or 'a later one'}" + entry(which, x, x2, cut) + ".")
    shown = "" if m.settings.vocab else f", input scales {', '.join(f'{s:g}' for s in SCALES)}"
    return Result("causality", "pass", f"no past output moved, every cut at {len(tried)} lengths (2-"
                                       f"{min(64, longest)} all, up to {longest}{shown}; eval and train mode; "
                                       f"{m.precision}; float16 and bfloat16 at T={', '.join(map(str, low))})"
                                       f"{stopped}{skipped}")


def announce(m: Module, plan, longest: int) -> None:
    """Before a long causality check starts, what it will cost: one batched pass at the longest length timed, times
    the passes planned (said where it comes to more than a few seconds)."""
    if longest < ANNOUNCE_FROM:
        return
    import time

    x = m.inputs(torch.Generator().manual_seed(0), 2 * max(1, min(longest - 1, CELLS // (longest * longest))), longest)
    start = time.perf_counter()
    with torch.no_grad():
        m(x)
    each = time.perf_counter() - start
    timed = x.shape[0] // 2 * longest * longest  # the cut x T x T cells of the pass timed
    passes = sum((t - 1) * t * t for _, t, _, _ in plan) / timed  # each pass costs about its cells
    tell(f"causality up to T={longest}: about {each * passes:.0f} s ({len(plan)} lengths and modes, every cut; "
         "--max-len sets the longest)", always=True)


def finite_max(y: Tensor) -> Tensor:
    """The largest finite |y| (0 when none is)."""
    finite = y[torch.isfinite(y)].abs()
    return finite.max() if finite.numel() else torch.zeros((), dtype=y.dtype)


def change(new: Tensor, old: Tensor) -> Tensor:
    """|new - old| elementwise, inf where one is finite and the other not, 0 where neither is (a NaN the past had
    anyway is not a leak: the sees-itself and padding checks report it)."""
    both = ~torch.isfinite(new) & ~torch.isfinite(old)
    diff = (new - old).abs().nan_to_num(nan=float("inf"))
    return diff.masked_fill(both, 0.0)


def seen_later(m: Module, x: Tensor, i: int, gen: torch.Generator, scale: float) -> list[int]:
    """The later positions j > i whose token alone, changed, moves position i's output."""
    base = m(x)[:, i]
    seen = []
    for j in range(i + 1, x.shape[1]):
        x2 = x.clone()
        x2[:, j : j + 1] = m.fresh(x[:, j : j + 1], gen, scale)
        if change(m(x2)[:, i], base).max() > m.tol * finite_max(base):
            seen.append(j)
    return seen


def spans(positions: list[int]) -> str:
    """[1, 2, 3, 7] -> 'positions 1-3 and 7'; [33] -> 'position 33'."""
    runs: list[list[int]] = []
    for p in positions:
        if runs and p == runs[-1][-1] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    parts = [f"{r[0]}" if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs]
    if not parts:
        return ""
    word = "position" if len(positions) == 1 else "positions"
    return f"{word} {', '.join(parts[:-1]) + ' and ' if len(parts) > 1 else ''}{parts[-1]}"


def entry(m: Module, x: Tensor, x2: Tensor, cut: int) -> str:
    """'; the leak arises in blocks.1.attn': the innermost submodule whose outputs before the cut moved while its
    inputs before the cut did not (the first such to finish), or the module's own forward when none did."""
    seen: list[dict[str, tuple[Tensor | None, Tensor]]] = [{}, {}]
    names = {mod: name for name, mod in m.module.named_modules() if name}
    for record, inp in zip(seen, (x, x2), strict=True):
        def hook(mod, args, out, record=record):
            out = first_of(out)
            arg = args[0] if args and isinstance(args[0], Tensor) and args[0].shape[:2] == x.shape[:2] else None
            if isinstance(out, Tensor) and out.dim() >= 2 and out.shape[:2] == x.shape[:2]:
                record.setdefault(names[mod], (arg, out.detach()))
        handles = [mod.register_forward_hook(hook) for mod in names]
        try:
            m(inp)
        finally:
            for h in handles:
                h.remove()
    for name, (arg, out) in seen[0].items():  # in the order they finished: the innermost first
        arg2, out2 = seen[1].get(name, (None, None))
        if arg is None or arg2 is None or out2 is None:
            continue
        if relative_change(arg2[:, :cut], arg[:, :cut]) <= m.tol < relative_change(out2[:, :cut], out[:, :cut]):
            return f"; the leak arises in {name}"
    return f"; the leak arises in {m.name}'s own forward" if names else ""


def check_sees_itself(m: Module, gen: torch.Generator) -> Result:
    """The first position's output is finite and depends on its own token, the only one it may see (a mask that
    also hides the diagonal leaves it nothing). A strictly causal design, where a query sees the keys before it and
    a learned null key but not its own, passes where the second position follows its own token (through its
    query, choosing between the null key and the first): a hidden diagonal with nothing besides gives the second
    position the first one's value whatever its own token."""
    m64 = m.copy()
    x = m64.inputs(gen, 2, 4)
    base = m64(x)
    x2 = x.clone()
    x2[:, :1] = m64.fresh(x[:, :1], gen)
    y0, y0_new = base[:, 0], m64(x2)[:, 0]
    if not (torch.isfinite(y0).all() and torch.isfinite(y0_new).all()):
        return Result("sees-itself", "fail", "position 0 not finite",
                      "the first position's output is not finite: its row has no visible key, so the mask hides "
                      "the diagonal (query i must see key i).")
    change = relative_change(y0_new, y0)
    if change <= 1e-8:
        x3 = x.clone()
        x3[:, 1:2] = m64.fresh(x[:, 1:2], gen)
        second = relative_change(m64(x3)[:, 1], base[:, 1])
        if second > 1e-8:
            return Result("sees-itself", "pass", f"strictly causal: position 0 does not follow its own token, "
                                                 f"position 1 does ({second:.2g}): a query sees something besides "
                                                 "its past (a learned null key), not its own key")
        return Result("sees-itself", "fail", f"position 0 moved by {change:.2g}, position 1 by {second:.2g}",
                      "the first position's output does not depend on its own token, nor the second's on its own: "
                      "the mask hides the diagonal (query i must see key i).")
    return Result("sees-itself", "pass", f"position 0 follows its own token (relative change {change:.2g})")


def check_sees_past(m: Module, gen: torch.Generator) -> Result:
    """Attention mixes positions: the last position's output depends on earlier tokens. A module that maps each
    position on its own (a Linear, an MLP) passes causality, sees-itself and batch, and is no attention; this is
    the check it fails. Which earlier positions the last one sees is measured, one token changed at a time (a
    window that sees only the nearest few passes, and the number says how far it sees). With ``window`` W, the
    receptive field is asserted: at T = W + 2 the last position follows each of its W - 1 predecessors in the
    window and neither of the two before it (a window of W + 1 keys, transformers#39408, follows one of them)."""
    m64 = m.copy()
    w = m.settings.window
    t = w + 2 if w else min(8, m.settings.max_len)
    x = m64.inputs(gen, 2, t)
    seen = followed(m64, x, gen, sample(t, w))
    if w:
        return window_verdict(m, t, w, seen)
    if not seen:
        return Result("sees-past", "fail", f"position {t - 1} moved by none of positions 0-{t - 2}",
                      f"at T={t}, changing any one earlier token left the last position's output unchanged: "
                      f"{m.name} does not mix positions (each output is a function of its own token alone), so "
                      "it is not attention.")
    hint = "" if len(seen) == t - 1 else " (a window? --window W asserts its size)"
    return Result("sees-past", "pass", f"position {t - 1} follows {spans(seen)} of 0-{t - 2}{hint}")


def sample(t: int, w: int | None) -> list[int]:
    """The earlier positions whose influence on the last one sees-past measures: all of them, or with a window
    of more than 64 the two just outside it, its 8 oldest and 8 newest and 8 drawn between (each is a pass at
    length W + 2)."""
    if not w or w <= 64:
        return list(range(t - 1))
    inside = list(range(t - w, t - 1))  # (W - 1,) the positions before the last one in its window
    middle = inside[8:-8]
    return [0, 1, *inside[:8], *middle[:: max(1, len(middle) // 8)][:8], *inside[-8:]]


def followed(m: Module, x: Tensor, gen: torch.Generator, positions: list[int]) -> list[int]:
    """Of ``positions``, those whose token alone, changed, moves the last position's output (batched: one row
    per position)."""
    base = m(x)[:, -1]
    seen = []
    per_call = max(1, CELLS // (x.shape[1] ** 2))
    for start in range(0, len(positions), per_call):
        chunk = positions[start : start + per_call]
        xs = x.repeat(len(chunk), *([1] * (x.dim() - 1)))  # (2 * positions, T, ...)
        for n, j in enumerate(chunk):
            xs[2 * n : 2 * n + 2, j : j + 1] = m.fresh(x[:, j : j + 1], gen)
        try:
            ys = m(xs)[:, -1]
        except VerifyError:  # a module that takes a batch of 2 only: one position at a time
            ys = torch.cat([m(xs[2 * n : 2 * n + 2])[:, -1] for n in range(len(chunk))])
        for n, j in enumerate(chunk):
            if relative_change(ys[2 * n : 2 * n + 2], base) > 1e-8:
                seen.append(j)
    return seen


def window_verdict(m: Module, t: int, w: int, seen: list[int]) -> Result:
    """sees-past's verdict on a module declared to see each query's last ``w`` keys, itself included."""
    inside = [j for j in sample(t, w) if j >= t - w]
    outside = [j for j in seen if j < t - w]
    missed = [j for j in inside if j not in seen]
    field = f"positions {t - w}-{t - 1}" if w > 1 else f"position {t - 1}"
    measured = f"at T={t}, position {t - 1} follows {spans(seen) or 'no earlier position'} of 0-{t - 2}"
    if outside:
        keys = t - min(outside)
        why = f"at T={t} the last position sees {keys} keys, itself included, back to position {min(outside)}: "
        if keys == w + 1:
            why += (f"one more than the window of {w} ({field}), the slip of transformers#39408 (flash-attn's "
                    "window_size=(W, 0) attends to W + 1 keys; W keys, itself included, is (W - 1, 0)).")
        else:
            why += f"more than the window of {w} ({field})."
        return Result("sees-past", "fail", measured, why)
    if missed:
        return Result("sees-past", "fail", measured,
                      f"at T={t} the last position does not follow {spans(missed)}, inside the window of {w} keys "
                      f"({field}): it sees less than its window.")
    return Result("sees-past", "pass", f"{measured}: its window of {w} keys, itself included, and nothing before")


ROPE = ("RoPE's weights depend on q and k as well as on their distance and favour no direction that holds for every "
        "input: no profile over distance to assert from outside; a rotation cached without its offset is the kv-cache "
        "check's finding (--kv-cache), a rotation that lets a later key in the causality check's")


def check_distance(m: Module, gen: torch.Generator) -> Result:
    """Relative positions as the module declares them (``positions``: alibi or rope). For both, first: with the same
    token at every position, every output is the same. The values are then all equal, so whatever weights the
    positions give, each query averages the same vector; a relative scheme tells positions apart only through the
    weights, so an output that differs by position means something absolute entered (RoPE applied to the values, a
    position table left on). Then ALiBi (on vectors): a small change to key j's token moves the last query's output
    by its weight on key j times a fixed vector (the scores' own change moves nothing where all values are equal);
    that weight must fall with distance (ALiBi's bias is -slope * distance, slopes positive), so slopes of the wrong
    sign or a bias never added fail. RoPE's weights have no such profile (said in the measured line)."""
    m64 = m.copy()
    t = min(16, m.settings.max_len)
    one = m64.inputs(gen, 2, 1)  # (2, 1, C) or token ids (2, 1)
    x = one.expand(2, t, *one.shape[2:]).clone()  # (2, T, C) or (2, T): one token repeated at every position
    y = m64(x)  # (2, T, ...)
    off = (y - y[:, :1]).double().abs().flatten(2).amax(dim=(0, 2)) / y.double().abs().max().clamp_min(1e-300)  # (T,)
    if float(off.max()) > m.tol:
        i = int(torch.nonzero(off > m.tol)[0])
        return Result("distance", "fail", f"position {i} differs from position 0 by {float(off[i]):.2g}",
                      f"with the same token at every position, the output at position {i} differs from position 0's: "
                      f"the values are then all equal, so relative positions ({m.settings.positions}) give every "
                      "position the same output whatever its weights; something absolute enters (RoPE applied to "
                      "the values? a position table as well?).")
    same = f"the same token everywhere gives the same output everywhere (relative error {float(off.max()):.1e})"
    if m.settings.positions == "rope":
        return Result("distance", "pass", f"{same}; {ROPE}")
    if m.settings.vocab:
        return Result("distance", "pass", f"{same}; ALiBi's weights by distance need a small change to a token, "
                                          "which token ids do not have: check the attention module on its own")
    step = 1e-2 if m.work == torch.float32 else 1e-5  # float32's rounding is 1e-7 of the output
    nudge = torch.randn(2, 1, m.width, generator=gen, dtype=x.dtype) * step
    xs = x.repeat(t, 1, 1)  # (2 * T, T, C): row pair j has position j nudged
    for j in range(t):
        xs[2 * j : 2 * j + 2, j : j + 1] += nudge
    base, ys = y[:, -1], m64(xs)[:, -1]
    by_pos = torch.stack([(ys[2 * j : 2 * j + 2] - base).double().norm() for j in range(t)])  # (T,)
    weight = by_pos.flip(0) / by_pos.max()  # (T,): by distance 0..T-1 from the last query, the largest 1
    far = float(weight[-1] / weight[1])
    rises = [d for d in range(1, t - 1) if weight[d + 1] > weight[d] * 1.01]
    measured = f"at T={t}, the farthest key (distance {t - 1}) weighs {far:.2g} times the nearest earlier one"
    if far > 1.01:
        return Result("distance", "fail", measured,
                      f"with the same token at every position, the last query's weight grows with distance (the key "
                      f"{t - 1} away weighs {far:.2g} times the nearest earlier one): ALiBi's bias, -slope * distance, "
                      "favours nearer keys; slopes of the wrong sign?")
    if far > 0.99:
        return Result("distance", "fail", measured,
                      "with the same token at every position, the last query's weights do not fall with distance: "
                      "ALiBi's bias, -slope * distance, favours nearer keys; is the bias added to the scores?")
    if rises:
        return Result("distance", "fail", measured,
                      f"with the same token at every position, the last query's weight rises from distance {rises[0]} "
                      f"to {rises[0] + 1}: ALiBi's bias, -slope * distance, falls with every step of distance.")
    return Result("distance", "pass", measured + ", falling at every step (ALiBi: nearer keys weigh more); " + same)


def check_batch(m: Module, gen: torch.Generator) -> Result:
    """Changing one sequence of a batch leaves the others' outputs unchanged."""
    m64 = m.copy()
    x = m64.inputs(gen, 3, min(16, m.settings.max_len))
    base = m64(x)
    x2 = x.clone()
    x2[1] = m64.fresh(x[1:2], gen)[0]
    moved = relative_change(m64(x2)[[0, 2]], base[[0, 2]])
    if moved > m.tol:
        return Result("batch", "fail", f"neighbours moved by {moved:.2g}",
                      "changing sequence 1 of the batch moved the outputs of sequences 0 and 2: sequences are mixed.")
    return Result("batch", "pass", f"no neighbour moved ({m.precision})")


def check_padding(m: Module, gen: torch.Generator) -> Result:
    """With the module's padding mask (B, T), True = real token: every output finite (a left-padded query sees no
    real key), the padded tokens invisible to the real ones, an all-real mask the same as none, and a left- or
    right-padded sequence's real outputs those of its real tokens alone (its positions, if it has any, count real
    tokens: positions that count the pads, or restart inside a row, fail)."""
    m64, key = m.copy(), m.settings.padding
    t = min(12, m.settings.max_len)
    x = m64.inputs(gen, 3, t)
    real = torch.ones(3, t, dtype=torch.bool)
    real[0, : t // 3] = False  # left padding
    real[2, t - t // 4 :] = False  # right padding
    y = m64(x, **{key: real})
    x2 = x.clone()
    x2[~real] = m64.fresh(x[~real][None], gen)[0]
    if not torch.isfinite(y).all():
        return Result("padding", "fail", f"{int((~torch.isfinite(y)).sum())} non-finite outputs",
                      "a padded query that sees no real key (left padding) gives a non-finite output."
                      + inverted(m64, x, x2, real))
    moved = relative_change(m64(x2, **{key: real})[real], y[real])
    if moved > m.tol:
        return Result("padding", "fail", f"real outputs moved by {moved:.2g}",
                      "changing the padded tokens moved the real tokens' outputs: a real query sees padded keys."
                      + inverted(m64, x, x2, real))
    plain = relative_change(y[1], m64(x[1:2])[0])
    if plain > m.tol:
        return Result("padding", "fail", f"unpadded sequence moved by {plain:.2g}",
                      "a sequence whose mask is all real differs from the same sequence without a mask (given a "
                      "mask, are its positions counted otherwise, or restarted inside the row?).")
    left, right = t // 3, t - t // 4
    for row, real_part, how in ((0, slice(left, t), f"left-padded by {left}"), (2, slice(0, right), "right-padded")):
        alone = relative_change(y[row, real_part], m64(x[row : row + 1, real_part])[0])
        if alone > m.tol:
            return Result("padding", "fail", f"a padded sequence moved by {alone:.2g} from itself alone",
                          f"sequence {row} ({how}) gives its real tokens other outputs than the same tokens alone: its "
                          "positions count the pads, or restart inside it (a token's position is the number of real "
                          "tokens before it in its row).")
    return Result("padding", "pass", "padded tokens invisible, all outputs finite, an all-real mask = none, a padded "
                                     "sequence = itself alone")


def inverted(m: Module, x: Tensor, x2: Tensor, real: Tensor) -> str:
    """' With the mask inverted ...': when the module, given ~mask, hides the padded tokens (it reads True as
    padding, as torch's key_padding_mask does); '' when it does not either way."""
    key = m.settings.padding
    try:
        y, y2 = m(x, **{key: ~real}), m(x2, **{key: ~real})
    except VerifyError:
        return ""
    if torch.isfinite(y[real]).all() and relative_change(y2[real], y[real]) <= m.tol:
        return (f" Given the mask inverted (~mask) it hides them: {m.name} reads True as padding (torch's "
                f"key_padding_mask convention), while {key} here is True for a real token; wrap it to pass ~mask.")
    return ""


def check_kv_cache(m: Module, gen: torch.Generator) -> Result:
    """Decoding with the module's cache equals the whole sequence at once, over every position up to the longest the
    module takes (max_len at most): after a prefill of 1, one token at a time; and after a prefill of 5, steps of
    2, 3 and 16 tokens (chunked prefill, speculative decoding), then one at a time."""
    m64, method = m.copy(), m.settings.kv_cache
    step = getattr(m64.module, method, None)
    if not callable(step):
        raise VerifyError(f"{m.name} has no method {method}: kv_cache names a method step(x_new, cache) -> "
                          "(y_new, cache).")
    t, _ = m64.longest(gen)  # every position the module takes, up to max_len
    x = m64.inputs(gen, 2, t)
    full = m64(x)
    worst = 0.0
    for name, sizes in schedules(t):
        cache, parts, bounds, a = None, [], [], 0
        for size in sizes:
            bounds.append((a, a + size))
            a += size
        try:
            with torch.no_grad():
                for a, b in bounds:
                    torch.manual_seed(m.settings.seed)
                    y, cache = step(x[:, a:b].clone(), cache)  # a copy: x is not the module's to change
                    parts.append(first_of(y))
        except Exception as err:
            raise VerifyError(f"{m.name}.{method}(x_new, cache) with {b - a} new token{'s' * (b - a > 1)} after "
                              f"{a} cached ({name}) raised {described(err)}") from None
        decoded = torch.cat(parts, dim=1)
        worst = max(worst, relative_change(decoded, full))
        if worst > m.tol:
            pos = int(((decoded - full).abs().flatten(2).amax(dim=(0, 2)) > m.tol * full.abs().max()).nonzero()[0])
            a, b = next((a, b) for a, b in bounds if a <= pos < b)
            inside = f" (the step of {b - a} tokens at positions {a}-{b - 1})" if b - a > 1 and a else ""
            return Result("kv-cache", "fail", f"relative error {worst:.2g}",
                          f"decoding with the cache ({name}) differs from the whole sequence from position {pos} "
                          f"on{inside}.")
    return Result("kv-cache", "pass", f"cached decoding of {t} tokens = the whole sequence, one token at a time and "
                                      f"in steps of 2, 3 and 16 (relative error {worst:.1e}; {m.precision})")


def schedules(t: int) -> list[tuple[str, list[int]]]:
    """How the KV check feeds a sequence of ``t`` tokens: (its description, the sizes of the successive steps)."""
    chunked, left = [], t
    for size in (5, 2, 3, 16):
        if left > 0:
            chunked.append(min(size, left))
            left -= chunked[-1]
    return [("a prefill of 1, then one token at a time", [1] * t),
            ("a prefill of 5, then steps of 2, 3 and 16 tokens, then one at a time", chunked + [1] * left)]


def check_gradients(m: Module, gen: torch.Generator) -> Result:
    """The backward pass gives finite gradients for every parameter and the input (float64), with the padding mask
    too when the module takes one (where an all-masked row's -inf gives NaN)."""
    m64 = m.copy()
    t = min(16, m.settings.max_len)
    runs = [{}]
    if m.settings.padding:
        real = torch.ones(2, t, dtype=torch.bool)
        real[0, :4] = False
        runs.append({m.settings.padding: real})
    for kwargs in runs:
        m64.module.zero_grad()
        x = m64.inputs(gen, 2, t)
        if not m.settings.vocab:
            x.requires_grad_()
        y = m64(x, grad=True, **kwargs)
        (y * torch.randn(y.shape, generator=gen, dtype=y.dtype)).sum().backward()
        grads = {n: p.grad for n, p in m64.module.named_parameters() if p.grad is not None}
        if x.grad is not None:
            grads["the input"] = x.grad
        bad = [n for n, g in grads.items() if not torch.isfinite(g).all()]
        if bad:
            return Result("gradients", "fail", f"{len(bad)} of {len(grads)} gradients not finite",
                          f"the backward pass{' with the padding mask' if kwargs else ''} gives non-finite gradients "
                          f"for {', '.join(bad[:3])}{f' and {len(bad) - 3} more' if len(bad) > 3 else ''}.")
    padded = ", with padding" if len(runs) > 1 else ""
    return Result("gradients", "pass", f"{len(grads)} gradients finite ({m.precision}{padded})")


class ScoreWatch(TorchFunctionMode):
    """While a module runs, the largest |value| of every matrix product whose result ends in (T, T) (q k^T, as
    computed: in 16 bits an overflow shows as inf) and the largest value given to a softmax over such scores (the
    scores as scaled). A fused kernel's are not seen."""

    PRODUCTS = {"matmul", "__matmul__", "bmm", "baddbmm", "einsum"}

    def __init__(self, t: int):
        super().__init__()
        self.t, self.product, self.scores = t, None, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        if name in self.PRODUCTS and self.square(out):
            self.product = max(self.product or 0.0, float(out.detach().abs().float().max()))
        elif name == "softmax" and args and self.square(args[0]):
            self.scores = max(self.scores or 0.0, float(args[0].detach().float().max()))
        return out

    def square(self, x) -> bool:
        return isinstance(x, Tensor) and x.dim() >= 2 and tuple(x.shape[-2:]) == (self.t, self.t)


def check_16bit(m: Module, gen: torch.Generator) -> Result:
    """float16 and bfloat16 copies against a float32 copy of the same rounded weights, on the same rounded inputs:
    close at input scale 1; and float16 finite at the largest input scale where the scaled scores (the softmax's
    input) stay under 90% of float16's largest value, 65504, found by watching the float32 copy. There q k^T,
    computed before its scale, is sqrt(d_k) times larger and passes 65504 (for d_k >= 2): only a scale applied
    after the product overflows. Where the scores are not visible (a fused kernel), finite at input scale 100."""
    t = min(24 if m.width != 24 else 20, m.settings.max_len)  # a length unlike the width: (T, T) is the scores' shape
    x = m.inputs(gen, 2, t, dtype=torch.float32)
    close = {}
    for dtype, tol in {torch.float16: 2e-2, torch.bfloat16: 1e-1}.items():
        name = str(dtype).removeprefix("torch.")
        low = m.copy(dtype)
        ref = Module(copy.deepcopy(low.module).float(), m.width, m.settings)
        x_low = x if m.settings.vocab else x.to(dtype)
        close[name] = relative_change(low(x_low).float(), ref(x_low if m.settings.vocab else x_low.float()))
        if close[name] > tol:
            return Result("16-bit", verdict(m.settings), f"{name}: {close[name]:.2g} from float32",
                          f"in {name} the output is {close[name]:.2g} from float32 at input scale 1 "
                          f"(tolerance {tol:g}).")
        if dtype == torch.float16 and not m.settings.vocab:
            found = large_scores(low, ref, x, t)
            if found.verdict != "pass":
                return found
            notes = found.measured
    return Result("16-bit", "pass", ", ".join(f"{k} rel. error {v:.1e}" for k, v in close.items())
                  + ("" if m.settings.vocab else f"; {notes}"))


def large_scores(low: Module, ref: Module, x: Tensor, t: int) -> Result:
    """The float16 copy at the largest input scale whose float32 scores stay under 0.9 * FP16_MAX (steps of 2^(1/4):
    the scores grow by sqrt 2 each step; where they grow by under 5% two steps running, a norm on q and k or a soft
    cap bounds them, and the input grows no further: past there only the input itself would overflow), or at input
    scale 100 when the scores are not visible."""
    scale, product, scores, flat = None, None, None, 0
    s = 1.0
    while s < 1e6 and flat < 2:
        watch = ScoreWatch(t)
        with watch:
            y = ref(x * s)
        if watch.scores is None and watch.product is None or not torch.isfinite(y).all():
            break
        seen = watch.scores if watch.scores is not None else watch.product
        if seen > 0.9 * FP16_MAX:
            break
        flat = flat + 1 if scores is not None and seen < 1.05 * scores else 0  # a norm on q and k, a soft cap
        scale, product, scores = s, watch.product, seen
        s *= 2 ** 0.25
    if scale is None:  # no scores visible (a fused kernel): a plain large input
        x16 = (x * 100).to(torch.float16)
        if torch.isfinite(ref(x16.float())).all() and not torch.isfinite(low(x16)).all():
            return Result("16-bit", verdict(low.settings), "float16: not finite at input scale 100",
                          "in float16 the output is not finite at input scale 100, where float32 is finite.")
        return Result("16-bit", "pass", "finite at input scale 100 (no scores seen: a fused kernel, or no attention)")
    x16 = (x * scale).to(torch.float16)
    watch = ScoreWatch(t)
    with watch:
        out = low(x16)
    if torch.isfinite(out).all():
        inside = f" and q k^T {product:.3g}" if product and product != scores else ""
        bounded = (" (the scores stop growing with the input: a norm on q and k, or a soft cap, bounds them)"
                   if flat >= 2 else "")
        return Result("16-bit", "pass", f"float16 finite at input scale {scale:.3g}, where the scores reach "
                                        f"{scores:.3g}{inside}{bounded}")
    if product is not None and product > FP16_MAX and watch.product == float("inf"):
        why = (f"q k^T reaches {product:.3g} before its scale, past float16's largest 65504, while the scaled scores "
               f"stay at {scores:.3g}; a scale applied after the product overflows: multiply q by the scale before "
               "the product (or compute the scores in float32)")
    else:
        why = f"the scores reach {scores:.3g}, and a value inside passes float16's largest, 65504"
    return Result("16-bit", verdict(low.settings), f"float16: not finite at input scale {scale:.3g}",
                  f"in float16 the output is not finite at input scale {scale:.3g}, where float32 is finite: {why}.")


def verdict(settings: Settings) -> str:
    return "fail" if settings.strict_16bit else "warn"


CHECKS = {
    "deterministic": check_deterministic,
    "causality": check_causality,
    "sees-itself": check_sees_itself,
    "sees-past": check_sees_past,
    "distance": check_distance,
    "batch": check_batch,
    "padding": check_padding,
    "kv-cache": check_kv_cache,
    "gradients": check_gradients,
    "16-bit": check_16bit,
}


def applicable(settings: Settings) -> list[str]:
    """The module checks that apply: padding, the KV cache and distance only where the module offers or declares
    them."""
    offered = {"padding": settings.padding, "kv-cache": settings.kv_cache, "distance": settings.positions}
    return [n for n in CHECKS if offered.get(n, True)]
