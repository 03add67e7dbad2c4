"""attention/explorer.html: the saved attention weights of every probe step as one interactive page.

Drawn with Plotly (plotly.js ships inside the ``plotly`` package, so the page works from ``file://`` with no
network): a grid of small multiples (one heatmap per layer and head) at the current step, the selected head
enlarged, the probe text as a line of characters shaded by the weights of the selected query, and per-head
numbers (normalised entropy, weight on the previous and the first token, future mass). Plotly draws and
hovers; a short script (``GLUE`` below) ties the controls together: the step slider, the layer and head menus,
a click on a small multiple to enlarge it, a click or hover on a character or a row to pick the query.

The weights are stored quantised to 16 bits (round(w x 65535)): at most 7.7e-6 from the saved float32 value,
below the 3 significant digits the hover shows for any weight above 0.008. Where every step's weights above the
diagonal are exactly 0 (a causal model) the masked future is drawn empty; a leaky model's future is drawn.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import numpy as np

from tinygpt.model.attention import normalised_entropy

QUANT = 65535  # weights are stored as round(w * QUANT) in uint16


def load_steps(attention_dir: Path) -> list[tuple[int, np.ndarray, list[str]]]:
    """Every ``stepNNNNNN.npz`` under a run's attention dir: (step, weights (L, H, T, T), labels), by step."""
    out = []
    for f in sorted(Path(attention_dir).glob("step*.npz")):
        if not f.stem[4:].isdigit():
            continue
        with np.load(f) as z:
            out.append((int(f.stem[4:]), z["weights"].astype(np.float32), [str(c) for c in z["labels"]]))
    return out


def head_stats(w: np.ndarray) -> dict[str, np.ndarray]:
    """Per layer and head of w (L, H, T, T): normalised entropy (each row over log(#keys it can see; all T
    without a mask), mean over rows with a choice), mean weight on the previous token (rows i >= 1) and on the
    first token, and the future mass (weight on keys j > i, mean over rows)."""
    L, H, T, _ = w.shape
    causal = bool(np.all(np.triu(w, 1) == 0))
    ent = normalised_entropy(w, causal)  # (L, H, rows with a choice)
    i = np.arange(1, T)
    return {
        "entropy": ent.mean(-1),
        "previous": w[..., i, i - 1].mean(-1) if T > 1 else np.zeros((L, H)),
        "first": w[..., :, 0].mean(-1),
        "future": (w * np.triu(np.ones((T, T)), 1)).sum(-1).mean(-1),
    }


def quantise(w: np.ndarray) -> str:
    """w in [0, 1] -> base64 of little-endian uint16 round(w * QUANT), in C order."""
    q = np.round(np.clip(w, 0, 1) * QUANT).astype("<u2")
    return base64.b64encode(q.tobytes()).decode("ascii")


def dequantise(text: str, shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of ``quantise``: what the page decodes."""
    return np.frombuffer(base64.b64decode(text), dtype="<u2").reshape(shape).astype(np.float64) / QUANT


def axis_labels(labels: list[str]) -> list[str]:
    """Unique category labels 'position char' (the hover shows both)."""
    return [f"{i} {c if c.strip() else repr(c)[1:-1] or '␠'}" for i, c in enumerate(labels)]


def payload(steps: list[tuple[int, np.ndarray, list[str]]], title: str) -> dict:
    """What the page holds: the quantised weights per step, the labels, the per-head numbers."""
    _, w0, labels = steps[-1]
    L, H, T, _ = w0.shape
    for step, w, lab in steps:
        if w.shape != w0.shape or lab != labels:
            raise ValueError(f"attention at step {step} has shape {w.shape} and {len(lab)} labels; the explorer "
                             f"needs every step to match the last one, {w0.shape}.")
    causal = all(bool(np.all(np.triu(w, 1) == 0)) for _, w, _ in steps)
    return {
        "title": title, "L": L, "H": H, "T": T, "causal": causal, "quant": QUANT,
        "labels": labels, "axis": axis_labels(labels),
        "steps": [s for s, _, _ in steps],
        "weights": [quantise(w) for _, w, _ in steps],
        "stats": [{k: np.round(v, 4).tolist() for k, v in head_stats(w).items()} for _, w, _ in steps],
    }


def figure(data: dict, blank: bool = False):
    """The Plotly figure at the last step, layer 0, head 0, the last query (weights rounded to 4 decimals); the
    page's script drives it. ``blank``: heatmaps without values (the page's script fills them on load)."""
    import plotly.graph_objects as go

    L, H, T = data["L"], data["H"], data["T"]
    w = dequantise(data["weights"][-1], (L, H, T, T))
    masked = np.triu(np.ones((T, T), dtype=bool), 1) if data["causal"] else np.zeros((T, T), dtype=bool)
    axis = data["axis"]

    def z(layer: int, head: int) -> np.ndarray:
        return np.full((1, 1), np.nan) if blank else np.round(np.where(masked, np.nan, w[layer, head]), 4)

    fig = go.Figure()
    layout: dict = {}
    gap = 0.012
    cell_w, cell_h = (0.44 - gap * (H - 1)) / H, (0.53 - gap * (L - 1)) / L
    notes = [{"text": f"head {h}", "x": h * (cell_w + gap) + cell_w / 2, "y": 1.0, "yanchor": "bottom",
              "showarrow": False, "xref": "paper", "yref": "paper", "font": {"size": 10}} for h in range(H)]
    notes += [{"text": f"layer {i}", "x": -0.005, "y": 1 - i * (cell_h + gap) - cell_h / 2, "xanchor": "right",
               "textangle": -90, "showarrow": False, "xref": "paper", "yref": "paper", "font": {"size": 10}}
              for i in range(L)]
    notes.append({"text": "click a small multiple to enlarge it; hover or click a character (below) or a row (right) "
                          "to pick the query", "x": 1.0, "y": 0.385, "xanchor": "right", "showarrow": False,
                  "xref": "paper", "yref": "paper", "font": {"size": 11, "color": "#555"}})
    hover = "query %{y}<br>key %{x}<br>weight %{z:.3g}<extra>layer %{meta[0]}, head %{meta[1]}</extra>"
    for layer in range(L):
        for head in range(H):
            k = layer * H + head + 1
            x0, y1 = head * (cell_w + gap), 1 - layer * (cell_h + gap)
            layout[f"xaxis{k}"] = {"domain": [x0, x0 + cell_w], "visible": False, "anchor": f"y{k}"}
            layout[f"yaxis{k}"] = {"domain": [y1 - cell_h, y1], "visible": False, "autorange": "reversed",
                                   "anchor": f"x{k}"}
            fig.add_trace(go.Heatmap(z=z(layer, head), x=axis, y=axis, xaxis=f"x{k}", yaxis=f"y{k}", zmin=0, zmax=1,
                                     colorscale="Viridis", showscale=False, hovertemplate=hover,
                                     meta=[layer, head], name=f"L{layer} H{head}"))
    big = L * H + 1
    layout[f"xaxis{big}"] = {"domain": [0.52, 1.0], "anchor": f"y{big}", "tickangle": 0, "title": {"text": "key"},
                             "tickfont": {"size": 9}}
    layout[f"yaxis{big}"] = {"domain": [0.47, 1.0], "anchor": f"x{big}", "autorange": "reversed",
                             "title": {"text": "query"}, "tickfont": {"size": 9}}
    fig.add_trace(go.Heatmap(z=z(0, 0), x=axis, y=axis, xaxis=f"x{big}", yaxis=f"y{big}", zmin=0, zmax=1,
                             colorscale="Viridis", colorbar={"len": 0.5, "y": 0.735, "title": {"text": "weight"}},
                             hovertemplate=hover, meta=[0, 0], name="selected head"))
    text = big + 1
    q = T - 1
    layout[f"xaxis{text}"] = {"domain": [0, 1], "anchor": f"y{text}", "visible": False}
    layout[f"yaxis{text}"] = {"domain": [0.27, 0.33], "anchor": f"x{text}", "visible": False}
    row = np.round(np.where(masked[q], np.nan, w[0, 0, q]), 4)[None, :]
    fig.add_trace(go.Heatmap(z=row, x=axis, y=["keys"], text=[data["labels"]], texttemplate="%{text}",
                             textfont={"size": 16}, xaxis=f"x{text}", yaxis=f"y{text}", zmin=0, zmax=1,
                             colorscale="Blues", showscale=False, xgap=2,
                             hovertemplate="key %{x}<br>weight %{z:.3g}<extra>hover or click: make it the query"
                                           "</extra>", name="text"))
    stats = data["stats"][-1]
    fig.add_trace(go.Table(
        domain={"x": [0, 1], "y": [0, 0.22]},
        header={"values": ["layer", "head", "entropy (normalised)", "weight on previous token",
                           "weight on first token", "future mass"], "align": "left"},
        cells={"values": stats_columns(stats, L, H), "align": "left"}))
    fig.update_layout(
        **layout, height=1000, margin={"l": 60, "r": 30, "t": 70, "b": 20}, annotations=notes,
        title={"text": title_text(data, len(data["steps"]) - 1, 0, 0, q), "x": 0.01},
        sliders=[{"active": len(data["steps"]) - 1, "currentvalue": {"prefix": "step "}, "y": 0.44, "x": 0.0,
                  "len": 0.46, "pad": {"t": 0},
                  "steps": [{"label": str(s), "method": "skip", "args": [None]} for s in data["steps"]]}],
        updatemenus=[
            {"buttons": [{"label": f"layer {i}", "method": "skip", "args": ["layer", i]} for i in range(L)],
             "x": 0.62, "y": 1.075, "xanchor": "left", "direction": "down"},
            {"buttons": [{"label": f"head {i}", "method": "skip", "args": ["head", i]} for i in range(H)],
             "x": 0.71, "y": 1.075, "xanchor": "left", "direction": "down"},
        ],
    )
    return fig


def grid_figure(weights: np.ndarray, labels: list[str], step: int):
    """One probe step as small multiples (layers x heads) with hover: query, key, weight. What W&B shows at each
    probe step (its media panel has the step slider); the full explorer goes to W&B once, at the end."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    L, H, T, _ = weights.shape
    causal = bool(np.all(np.triu(weights, 1) == 0))
    masked = np.triu(np.ones((T, T), dtype=bool), 1) if causal else np.zeros((T, T), dtype=bool)
    axis = axis_labels(labels)
    fig = make_subplots(rows=L, cols=H, horizontal_spacing=0.02, vertical_spacing=0.03,
                        subplot_titles=[f"layer {i}, head {h}" for i in range(L) for h in range(H)])
    for i in range(L):
        for h in range(H):
            z = np.round(np.where(masked, np.nan, weights[i, h]), 4)
            fig.add_trace(go.Heatmap(
                z=z, x=axis, y=axis, zmin=0, zmax=1, colorscale="Viridis", showscale=(i, h) == (0, 0),
                hovertemplate=f"query %{{y}}<br>key %{{x}}<br>weight %{{z:.3g}}<extra>layer {i}, head {h}</extra>"),
                row=i + 1, col=h + 1)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    fig.update_layout(title=f"attention at step {step} (hover a cell: query, key, weight)", height=220 * L + 80,
                      width=220 * H + 120, margin={"l": 20, "r": 20, "t": 60, "b": 20})
    return fig


def stats_columns(stats: dict, L: int, H: int) -> list[list]:
    rows = [(layer, head) for layer in range(L) for head in range(H)]
    return [[r[0] for r in rows], [r[1] for r in rows]] + [
        [f"{stats[k][layer][head]:.3f}" for layer, head in rows] for k in ("entropy", "previous", "first", "future")]


def title_text(data: dict, s: int, layer: int, head: int, q: int) -> str:
    return f"{data['title']}: step {data['steps'][s]}, layer {layer}, head {head}, query {data['axis'][q]}"


GLUE = r"""
(function () {
  const gd = document.getElementById('{plot_id}');
  const D = __DATA__;
  const L = D.L, H = D.H, T = D.T, BIG = L * H, TEXT = BIG + 1, TABLE = BIG + 2;
  const cache = {};
  function weights(s) {
    if (!cache[s]) {
      const bin = atob(D.weights[s]);
      const bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      cache[s] = new Uint16Array(bytes.buffer);
    }
    return cache[s];
  }
  function at(w, l, h, i, j) { return w[((l * H + h) * T + i) * T + j] / D.quant; }
  function map(w, l, h) {
    const z = [];
    for (let i = 0; i < T; i++) {
      const row = [];
      for (let j = 0; j < T; j++) row.push(D.causal && j > i ? null : at(w, l, h, i, j));
      z.push(row);
    }
    return z;
  }
  const state = {s: D.steps.length - 1, l: 0, h: 0, q: T - 1};
  function title() {
    return D.title + ': step ' + D.steps[state.s] + ', layer ' + state.l + ', head ' + state.h + ', query ' +
      D.axis[state.q];
  }
  function drawQuery() {
    const w = weights(state.s), row = [];
    for (let j = 0; j < T; j++) row.push(D.causal && j > state.q ? null : at(w, state.l, state.h, state.q, j));
    Plotly.restyle(gd, {z: [[row]]}, [TEXT]);
    Plotly.relayout(gd, {'title.text': title()});
  }
  function drawHead() {
    const w = weights(state.s);
    Plotly.restyle(gd, {z: [map(w, state.l, state.h)], meta: [[state.l, state.h]]}, [BIG]);
    Plotly.relayout(gd, {'updatemenus[0].active': state.l, 'updatemenus[1].active': state.h});
    drawQuery();
  }
  function drawStep() {
    const w = weights(state.s), zs = [], idx = [];
    for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) { zs.push(map(w, l, h)); idx.push(l * H + h); }
    Plotly.restyle(gd, {z: zs}, idx);
    const st = D.stats[state.s], cols = [[], [], [], [], [], []];
    for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
      cols[0].push(l); cols[1].push(h);
      ['entropy', 'previous', 'first', 'future'].forEach((k, c) => cols[c + 2].push(st[k][l][h].toFixed(3)));
    }
    Plotly.restyle(gd, {'cells.values': [cols]}, [TABLE]);
    drawHead();
  }
  gd.on('plotly_sliderchange', e => { state.s = e.step._index; drawStep(); });
  gd.on('plotly_buttonclicked', e => {
    const a = e.button.args;
    if (a[0] === 'layer') state.l = a[1]; else if (a[0] === 'head') state.h = a[1];
    drawHead();
  });
  gd.on('plotly_click', e => {
    const p = e.points[0], c = p.curveNumber;
    if (c < BIG) { state.l = Math.floor(c / H); state.h = c % H; drawHead(); }
    else if (c === BIG) { state.q = D.axis.indexOf(p.y); drawQuery(); }
    else if (c === TEXT) { state.q = D.axis.indexOf(p.x); drawQuery(); }
  });
  gd.on('plotly_hover', e => {
    const p = e.points[0];
    if (p.curveNumber === TEXT) { const q = D.axis.indexOf(p.x); if (q !== state.q) { state.q = q; drawQuery(); } }
  });
  window.tinygptExplorer = {state: state, data: D};
  drawStep();
})();
"""


def write(path: Path, steps: list[tuple[int, np.ndarray, list[str]]], title: str,
          library: str | Path = "inline") -> Path:
    """Write the explorer page. ``library``: 'inline' puts plotly.js inside the page (one self-contained file);
    'directory' writes it once as plotly.min.js beside the page and links it (for folders with several pages);
    a path to a ``.js`` file links that one copy by relative path, written there first if absent (for several
    folders of pages: the committed reports share one)."""
    shared = Path(library) if isinstance(library, Path) else None
    if shared is None and library not in ("inline", "directory"):
        raise ValueError(f"library is 'inline', 'directory' or a path to a .js file, got {library!r}.")
    if shared is not None and shared.suffix != ".js":
        raise ValueError(f"library {str(shared)!r} is not a .js file; give the path of the shared plotly.min.js.")
    if not steps:
        raise ValueError("no attention steps to draw.")
    data = payload(steps, title)
    fig = figure(data, blank=True)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if shared is not None:
        if not shared.exists():
            import plotly.offline
            shared.parent.mkdir(parents=True, exist_ok=True)
            shared.write_text(plotly.offline.get_plotlyjs(), encoding="utf-8")
        include = Path(os.path.relpath(shared.resolve(), path.parent.resolve())).as_posix()
    else:
        include = True if library == "inline" else "directory"  # directory: plotly writes plotly.min.js beside
    tmp = path.with_suffix(".tmp.html")
    try:
        fig.write_html(tmp, include_plotlyjs=include, full_html=True,
                       div_id="tinygpt-explorer",  # fixed, so a regenerated report is byte-identical
                       post_script=GLUE.replace("__DATA__", json.dumps(data, allow_nan=False)),
                       config={"displaylogo": False, "responsive": True})
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)  # a failed write (the target a directory, a full disk) leaves no 5 MB file behind
    return path


def write_run_explorer(run_dir: Path, title: str | None = None) -> Path | None:
    """<run>/attention/explorer.html from the run's saved weights (None when it saved none)."""
    steps = load_steps(Path(run_dir) / "attention")
    if not steps:
        return None
    return write(Path(run_dir) / "attention" / "explorer.html", steps, title or "attention")


def quantisation_error(steps) -> float:
    """The largest |stored - saved| weight over every step, layer, head and cell (for the record)."""
    worst = 0.0
    for _, w, _ in steps:
        worst = max(worst, float(np.abs(dequantise(quantise(w), w.shape) - w).max()))
    return worst
