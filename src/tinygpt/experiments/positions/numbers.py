"""Experiment 4's numbers (docs/experiments/positions/DESIGN.md): each estimate with its interval, each verdict word
from tinygpt.analysis.stats.in_range against the design's range.

- From the runs (their kept records): C, the final validation loss of each position minus learned's, per context T,
  paired by seed and window; L, the rise of the loss past T (positions [T, 4T) minus [T/2, T) of the same long
  windows); P1-P3, the position probe's held-out R^2 (1 - sum SSE / sum SST over the held-out windows).
- From the init draws (init_draws.json, no training): M1-M3, the log-log slope of the attention output's power against
  t + 1 (minus the predicted curve's), and P4, the probe's R^2 without mask and positions; one t-interval over the
  draws, each of which drew its own windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tinygpt.analysis import stats
from tinygpt.analysis.stats import Estimate, Sample
from tinygpt.analysis.sweep import ReportError, Run

POSITIONS = ("learned", "none", "rope", "alibi")
LABELS = {"learned": "learned", "none": "none", "rope": "RoPE", "alibi": "ALiBi"}
INF = math.inf


@dataclass(frozen=True)
class Verdict:
    key: str  # "C1", ... ("C1 T=64" where a prediction is judged at each context)
    what: str  # the measure's label
    estimate: Estimate
    verdict: str


def context(run: Run) -> int:
    return int(run.config["model"]["block_size"])


def position(run: Run) -> str:
    return str(run.config["model"].get("position", "learned"))


def grouped(runs: list[Run]) -> dict[int, dict[str, dict[int, Run]]]:
    """{T: {position: {seed: run}}}, contexts ascending, positions in POSITIONS' order."""
    out: dict[int, dict[str, dict[int, Run]]] = {}
    for r in runs:
        out.setdefault(context(r), {}).setdefault(position(r), {})[r.seed] = r
    return {t: {p: dict(sorted(out[t][p].items())) for p in POSITIONS if p in out[t]} for t in sorted(out)}


def common_seeds(arms: dict[str, dict[int, Run]]) -> list[int]:
    """The seeds every arm of a context ran (pairing needs the same seeds)."""
    seeds = set.intersection(*(set(a) for a in arms.values())) if arms else set()
    return sorted(seeds)


def t_interval(values, level: float = stats.LEVEL) -> Estimate:
    """The mean of independent replicates (init draws) and its t-interval."""
    from scipy import stats as scipy_stats

    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) < 2:
        return Estimate(float(v.mean()) if len(v) else math.nan, math.nan, math.nan, level)
    m, se = float(v.mean()), float(v.std(ddof=1) / math.sqrt(len(v)))
    t = float(scipy_stats.t.ppf(0.5 + level / 2, len(v) - 1))
    return Estimate(m, m - t * se, m + t * se, level, df=len(v) - 1)


# ----------------------------------------------------------------------------- C: what it costs


def loss_estimates(arms: dict[str, dict[int, Run]], seeds: list[int]) -> dict[str, Estimate]:
    """Each position's final validation loss (mean over windows and seeds) from one bootstrap call, arms paired by
    seed and window: {position: Estimate}."""
    samples = {}
    for p, by_seed in arms.items():
        values = np.stack([by_seed[s].window_means() for s in seeds])  # (S, N)
        samples[p] = Sample(values, "val", "seeds", tuple(seeds))
    return stats.bootstrap(samples)


# ----------------------------------------------------------------------------- L: past the trained context


def rises(arms: dict[str, dict[int, Run]], seeds: list[int], T: int, reference: str = "half") -> dict[str, Estimate]:
    """Each non-learned position's rise past T: per long window, the mean loss over [T, 4T) minus that over
    [T/2, T) (``reference`` "half", the design's; "all": over [0, T), post hoc) (long_buckets: [0, T/2), [T/2, T),
    [T, 2T), [2T, 4T)), averaged over windows and seeds; one bootstrap call, arms paired by seed and window."""
    samples = {}
    for p, by_seed in arms.items():
        if p == "learned":
            continue
        rows = []
        for s in seeds:
            b = by_seed[s].windows("long_buckets")  # (N, 4)
            if b is None:
                raise ReportError(f"{by_seed[s].dir} kept no long-window losses (measures.npz); rerun it with "
                                  "callbacks.positions.")
            factor = int(by_seed[s].config["callbacks"]["positions"]["factor"])
            beyond = (b[:, 2] * T + b[:, 3] * (factor - 2) * T) / ((factor - 1) * T)  # (N,): [T, factor T)
            rows.append(beyond - (b[:, 1] if reference == "half" else (b[:, 0] + b[:, 1]) / 2))
        samples[p] = Sample(np.stack(rows), "long", "seeds", tuple(seeds))
    return stats.bootstrap(samples) if samples else {}


# ----------------------------------------------------------------------------- P: the probe


def probe_r2(arms: dict[str, dict[int, Run]], seeds: list[int], when: str, layer: int = -1) -> dict[str, Estimate]:
    """Each position's held-out R^2 at ``layer`` (-1: the last block's output), ``when`` "init" or "end": 1 - mean
    SSE / mean SST over the held-out windows and seeds, one bootstrap call (arms paired by seed and window)."""
    samples, sst = {}, {}
    for p, by_seed in arms.items():
        sse = [by_seed[s].windows(f"probe_{when}_sse") for s in seeds]
        if any(x is None for x in sse):
            raise ReportError(f"a run of position {p} kept no probe (measures.npz); rerun it with callbacks.positions.")
        samples[p] = Sample(np.stack([x[layer] for x in sse]), "probe", "seeds", tuple(seeds))  # (S, held)
        sst[p] = float(np.mean([by_seed[s].windows("probe_sst").mean() for s in seeds]))
    found = stats.bootstrap(samples)
    return {p: stats.combine(lambda y, v=sst[p]: 1 - y[..., 0] / v, [found[p]]) for p in found}


def probe_layers(arms: dict[str, dict[int, Run]], seeds: list[int], when: str) -> dict[str, list[float]]:
    """Each position's R^2 at every layer (embedding, block 1 ... L), pooled over seeds: the table beside P."""
    out = {}
    for p, by_seed in arms.items():
        sse = np.stack([by_seed[s].windows(f"probe_{when}_sse") for s in seeds])  # (S, L + 1, held)
        sst = np.stack([by_seed[s].windows("probe_sst") for s in seeds])  # (S, held)
        out[p] = [float(1 - sse[:, i].sum() / sst.sum()) for i in range(sse.shape[1])]
    return out


# ----------------------------------------------------------------------------- M and P4: the init draws


def slopes(curves) -> np.ndarray:
    """The log-log slope of each curve (draws, T) against t + 1."""
    curves = np.asarray(curves, dtype=np.float64)
    return np.asarray(stats.loglog_slope(np.arange(1, curves.shape[1] + 1), curves))


def init_verdicts(draws: dict, pred: dict) -> list[Verdict]:
    m = []
    for key, name in (("M1", "random"), ("M2", "shakespeare")):
        got = draws["causal"][name]
        est = t_interval(slopes(got["power"]) - slopes(got["predicted"]))
        m.append(Verdict(key, "slope of s2(t) minus the predicted slope", est,
                         stats.in_range(est, -pred["m_band"], pred["m_band"])))
    est = t_interval(slopes(draws["no_mask"]["shakespeare"]["power"]))
    m.append(Verdict("M3", "slope of s2(t), no mask", est, stats.in_range(est, -pred["m3_band"], pred["m3_band"])))
    layers = [t_interval(np.asarray(draws["no_mask"][name]["r2"], dtype=np.float64)[:, i])  # every layer, both sets
              for name in draws["no_mask"] for i in range(len(draws["no_mask"][name]["r2"][0]))]
    worst = max(layers, key=lambda e: e.hi)
    if all(e.hi < pred["p4_max"] for e in layers):
        word = "holds"
    elif any(e.lo > pred["p4_max"] for e in layers):
        word = "fails"
    else:
        word = "undecided"
    m.append(Verdict("P4", "R^2, no mask, no positions (the layer and windows whose interval reaches highest)", worst,
                     word))
    return m


# ----------------------------------------------------------------------------- all verdicts


@dataclass(frozen=True)
class Context:
    """One trained context's runs and every estimate the report reads of them, each computed once."""

    T: int
    arms: dict[str, dict[int, Run]]  # position -> seed -> run
    seeds: list[int]  # the seeds every arm ran
    loss: dict[str, Estimate]  # position -> final validation loss (one bootstrap call: differences stay paired)
    rise: dict[str, Estimate]  # position -> rise past T against [T/2, T) (the design's)
    rise_all: dict[str, Estimate]  # ... against all in-range positions (post hoc)
    r2: dict[str, dict[str, Estimate]]  # "init" | "end" -> position -> the last block's held-out R^2
    layers: dict[str, dict[str, list[float]]]  # "init" | "end" -> position -> R^2 at every layer, pooled
    buckets: dict[str, np.ndarray]  # position -> (4,) long-window bucket losses, mean over seeds and windows


def contexts(runs: list[Run]) -> list[Context]:
    """Each context the runs trained at, contexts ascending, with its estimates."""
    out = []
    for T, arms in grouped(runs).items():
        seeds = common_seeds(arms)
        out.append(Context(
            T, arms, seeds, loss_estimates(arms, seeds), rises(arms, seeds, T), rises(arms, seeds, T, "all"),
            {w: probe_r2(arms, seeds, w) for w in ("init", "end")},
            {w: probe_layers(arms, seeds, w) for w in ("init", "end")},
            {p: np.stack([by_seed[s].windows("long_buckets") for s in seeds]).mean((0, 1))  # (4,)
             for p, by_seed in arms.items() if p != "learned"}))
    return out


def run_verdicts(ctxs: list[Context], pred: dict) -> list[Verdict]:
    """C1-C3, L1-L3 and P1-P3 at each context trained with at least two seeds."""
    out = []
    for c in ctxs:
        if len(c.seeds) < 2:
            continue
        tag = f" T={c.T}"
        if "learned" in c.loss:
            for key, p in (("C1", "none"), ("C2", "rope"), ("C3", "alibi")):
                if p in c.loss:
                    d = c.loss[p] - c.loss["learned"]
                    out.append(Verdict(key + tag, f"val loss, {LABELS[p]} - learned (nats)", d,
                                       stats.in_range(d, -pred["c_band"], pred["c_band"])))
        for key, p, lo, hi in (("L1", "alibi", -INF, pred["l_band"]), ("L2", "rope", pred["l_rope"], INF),
                               ("L3", "none", pred["l_band"], INF)):
            if p in c.rise:
                out.append(Verdict(key + tag, f"rise past T, {LABELS[p]} (nats)", c.rise[p],
                                   stats.in_range(c.rise[p], lo, hi)))
        if "none" in c.arms:
            end, init = c.r2["end"], c.r2["init"]
            out.append(Verdict("P1" + tag, "R^2, none, end", end["none"], stats.in_range(end["none"], 0.0, INF)))
            if "learned" in c.arms:
                d = end["none"] - end["learned"]
                out.append(Verdict("P2" + tag, "R^2, none - learned, end", d, stats.in_range(d, -INF, 0.0)))
            out.append(Verdict("P3" + tag, "R^2, none, init", init["none"], stats.in_range(init["none"], 0.0, INF)))
    return out
