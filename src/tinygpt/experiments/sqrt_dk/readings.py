"""What design 2 reads from each run of Experiment 2 (docs/experiments/sqrt_dk/DESIGN.md, "Measures"): its arm
(init, d_k, scale, the control it is, where the scale sits, its precision), its rate and seed, and per run the
final window losses, the half-budget loss, the mechanism at init and through training, the loss spikes and, in
float16, the overflow record. Only through the Run's own methods (summary, config, series, window_measure), so a run
rebuilt from its kept record (tinygpt.analysis.records.KeptRun) answers every reading as its run dir did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tinygpt.analysis.sweep import Run, window_measure
from tinygpt.experiments.sqrt_dk.verdicts import loss_spikes, steps_to


@dataclass(frozen=True, order=True)
class Arm:
    """One arm of design 2: ``init`` unit | gpt2, ``d_k``, ``scale`` sqrt_dk | none, ``control`` '' | init | full
    (the reparametrisation controls), ``placement`` scores | qk | sdpa, ``precision`` as the trainer ran it."""

    init: str
    d_k: int
    scale: str
    control: str = ""
    placement: str = "scores"
    precision: str = "32-true"

    @property
    def fp16(self) -> bool:
        return self.precision.startswith("16")

    @property
    def place(self) -> str:
        """Where the scale sits, as the float16 records name it: scores | qk | sdpa, '(unscaled)' without one."""
        return self.placement if self.scale == "sqrt_dk" else f"{self.placement} (unscaled)"

    @property
    def label(self) -> str:
        scale = "1/sqrt(d_k)" if self.scale == "sqrt_dk" else "unscaled"
        control = {"init": ", q/k rows / d_k^(1/4) at init", "full": ", q/k rows and steps / d_k^(1/4)"}.get(
            self.control, "")
        where = {"qk": ", scale on q and k", "sdpa": ", fused sdpa"}.get(self.placement, "")
        return (f"{'unit' if self.init == 'unit' else 'GPT-2'} init, d_k = {self.d_k}, {scale}{control}{where}"
                + (", float16" if self.fp16 else ""))


def arm_of(run: Run) -> Arm:
    m = run.config["model"]
    attn = m["attn"]
    control = ""
    for node in m.get("patch") or []:
        if str(node.get("_target_", "")).endswith("QKReparam"):
            control = "full" if node.get("step") else "init"
    placement = "sdpa" if attn.get("backend") == "sdpa" else str(attn.get("scale_at", "scores"))
    return Arm(str(attn.get("qk_init", "gpt2")), m["n_embd"] // m["n_head"], str(attn["scale"]), control, placement,
                str(run.config["trainer"].get("precision", "32-true")))


def lr(run: Run) -> float:
    return float(run.config["optim"]["lr"])


def diverged(run: Run) -> bool:
    return bool(run.summary.get("diverged")) or not math.isfinite(run.summary.get("val_loss") or math.nan)


def final_windows(run: Run, n_windows: int) -> np.ndarray:
    """(windows,) final validation loss of each window; a diverged run counts as ln(vocab) on every window."""
    if diverged(run):
        return np.full(n_windows, math.log(run.summary["vocab_size"]))
    return window_measure(run, "mean")


def half_budget_loss(run: Run) -> float:
    """The validation loss of the first validation (step 150 of 300): NaN for a run that diverged before it."""
    steps, values = run.series("val/loss")
    last = run.config["trainer"]["max_steps"] - 1
    early = values[steps < last]
    return float(early[0]) if len(early) else math.nan


def layers(run: Run) -> int:
    return int(run.config["model"]["n_layer"])


def probe(run: Run, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A per-layer probe series as (steps, values (probes, layers))."""
    series = [run.series(f"stab/{name}/{layer}") for layer in range(layers(run))]
    steps = series[0][0]
    return steps, np.stack([v for _, v in series], axis=1) if len(steps) else np.empty((0, layers(run)))


def trace_at_init(run: Run) -> float:
    """The softmax Jacobian's trace over its uniform value at step 0 (the probe at init), mean of the layers."""
    steps, v = probe(run, "jacobian_trace")
    at = v[steps == 0]
    return float(at[0].mean()) if len(at) else math.nan


def at_init(run: Run, name: str) -> float:
    """A probe's value at step 0, the mean of the layers (NaN when the run has no probe at init)."""
    steps, v = probe(run, name)
    at = v[steps == 0]
    return float(np.nanmean(at[0])) if len(at) else math.nan


def largest_at_init(run: Run, name: str) -> float:
    """A probe's value at step 0, the largest over the layers (NaN when the run has no probe at init): the largest
    raw q.k of any layer, not the mean of the layers' largest."""
    steps, v = probe(run, name)
    at = v[steps == 0]
    return float(np.nanmax(at[0])) if len(at) and np.isfinite(at[0]).any() else math.nan


def trace_in_training(run: Run) -> float:
    """The same, averaged over the probes after init (steps 20 ... 300)."""
    steps, v = probe(run, "jacobian_trace")
    later = v[steps > 0]
    return float(later.mean()) if len(later) else math.nan


GRADIENT_LABEL = "sqrt of the sum over layers of ||dL/dW_Q||^2 + ||dL/dW_K||^2"  # what gradient_at_init computes


def gradient_at_init(run: Run) -> float:
    """sqrt(sum over layers of ||dL/dW_Q||^2 + ||dL/dW_K||^2) at step 0 (GRADIENT_LABEL): the root of the sum over
    the layers, not their mean."""
    sq, q = probe(run, "grad_wq")
    sk, k = probe(run, "grad_wk")
    if not (len(sq) and len(sk)) or not (sq == 0).any():
        return math.nan
    return float(math.sqrt((q[sq == 0][0] ** 2).sum() + (k[sk == 0][0] ** 2).sum()))


def spikes(run: Run, nats: float) -> int:
    """Loss spikes after warmup (tinygpt.experiments.sqrt_dk.verdicts.loss_spikes) on the per-step training loss."""
    steps, values = run.series("train/loss")
    return loss_spikes(steps, values, after=int(run.config["optim"]["warmup_steps"]), nats=nats)


STEPS_WINDOW = 20  # steps_to_bigram: the training loss averaged over this many steps (one batch of 12 is noisy)


def steps_to_bigram(run: Run) -> tuple[int, bool]:
    """The first step at which the training loss (its mean over the last STEPS_WINDOW steps) is below a bigram
    model's loss on the validation windows (the run's own diagnostics), and whether it got there: a run that never
    did counts as trainer.max_steps, a lower bound (verdicts.steps_to)."""
    budget = int(run.config["trainer"]["max_steps"])
    bigram = (run.summary.get("diagnostics") or {}).get("bigram_loss")
    if bigram is None:
        return budget, False
    steps, values = run.series("train/loss")
    n = steps_to(steps, values, float(bigram), STEPS_WINDOW, budget)
    return n, n < budget


def formed_product(run: Run, signed: bool = False) -> tuple[str, np.ndarray]:
    """F1 per run (DESIGN.md, amendment 4): the product a float16 run's forward forms, as the batch probe logged it
    in float32 on each step's own training batch (``stab/batch_raw_qk``, ``stab/batch_scaled_qk``, at the 0-based
    index of the batch about to be trained): the scaled one where the scale is folded into q and k (placement
    ``qk``), the raw one where it comes after the product or there is none. The largest |q.k|; with ``signed``, the
    largest signed value (``..._pos``: F3, amendment 5). Returns (the series' name, values indexed by batch: NaN at a
    batch it did not log; empty when the run has no such series)."""
    name = "stab/batch_scaled_qk" if arm_of(run).placement == "qk" else "stab/batch_raw_qk"
    name += "_pos" if signed else ""
    steps, values = run.series(name)
    if not len(steps):
        return name, np.empty(0)
    out = np.full(int(steps.max()) + 1, np.nan)
    out[steps.astype(int)] = values
    return name, out


def last_batch(run: Run) -> int | None:
    """The last batch index the batch probe logged (None without one): for a run the divergence guard stopped at its
    first non-finite loss, the batch that went non-finite."""
    steps, _ = run.series("stab/batch_raw_qk")
    return int(steps.max()) if len(steps) else None


@dataclass(frozen=True)
class Overflow:
    """A float16 run's record: whether a probed score was inf, the largest raw and scaled q.k as float16 held them,
    and how it ended (completed; diverged on a non-finite loss; diverged past the guard's limit)."""

    scores_inf: bool
    raw_qk: float
    scaled_qk: float
    ended: str


def overflow(run: Run) -> Overflow:
    _, inf = probe(run, "scores_inf")
    _, raw = probe(run, "raw_qk")
    _, scaled = probe(run, "scaled_qk")
    ended = "completed" if not diverged(run) else ("past the guard's limit" if math.isfinite(guard_loss(run))
                                                   else "non-finite loss")
    return Overflow(bool(inf.size and np.nanmax(inf) > 0), float(np.nanmax(raw)) if raw.size else math.nan,
                    float(np.nanmax(scaled)) if scaled.size else math.nan, ended)


def guard_loss(run: Run) -> float:
    """The training loss the divergence guard stopped the run at ("training loss <x> at step <n> (limit <y>)");
    NaN when the run was not stopped by it or the loss was not finite."""
    words = str(run.summary.get("divergence") or "").split()
    try:
        return float(words[2]) if words[:2] == ["training", "loss"] else math.nan
    except (IndexError, ValueError):
        return math.nan
