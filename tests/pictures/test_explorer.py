"""The attention explorer page: its data round-trips to the saved weights, it needs no network, it stays small."""

import json
import re

import numpy as np
import pytest

from tinygpt.pictures import explorer


def causal_weights(L=2, H=3, T=7, seed=0):
    """Random softmax rows under a causal mask: (L, H, T, T)."""
    rng = np.random.default_rng(seed)
    s = rng.normal(0, 2, (L, H, T, T))
    s[..., np.triu(np.ones((T, T), dtype=bool), 1)] = -np.inf
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)).astype(np.float32)


def page_data(html: str) -> dict:
    """The JSON the page's script reads (const D = {...};)."""
    m = re.search(r"const D = (\{.*?\});\n", html, re.S)
    assert m, "no data in the page"
    return json.loads(m.group(1))


def test_the_page_holds_every_step_within_the_stated_quantisation_error(tmp_path):
    labels = list("to be o")
    steps = [(10, causal_weights(seed=1), labels), (20, causal_weights(seed=2), labels)]
    page = explorer.write(tmp_path / "explorer.html", steps, "test")
    data = page_data(page.read_text())
    assert data["steps"] == [10, 20] and data["labels"] == labels and data["causal"] is True
    assert data["axis"][2] == "2 ␠" or data["axis"][2].startswith("2 ")
    for (_, w, _), text in zip(steps, data["weights"], strict=True):
        back = explorer.dequantise(text, w.shape)  # every layer, head, query and key
        assert np.abs(back - w).max() <= 0.5 / explorer.QUANT + 1e-7
    assert explorer.quantisation_error(steps) <= 0.5 / explorer.QUANT + 1e-7


def test_the_page_loads_nothing_from_the_network(tmp_path):
    page = explorer.write(tmp_path / "e.html", [(0, causal_weights(), list("abcdefg"))], "test")
    html = page.read_text()
    assert not re.search(r"<script[^>]+src=[\"']https?://", html)
    assert "plotly" in html.lower() and len(html) > 3_000_000  # the library is inside


def test_pages_in_one_folder_share_one_copy_of_the_library(tmp_path):
    for name in ("causal", "leaky"):
        explorer.write(tmp_path / f"{name}.html", [(0, causal_weights(), list("abcdefg"))], name,
                       library="directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["causal.html", "leaky.html", "plotly.min.js"]
    for name in ("causal", "leaky"):
        html = (tmp_path / f"{name}.html").read_text()
        assert len(html) < 500_000 and re.search(r'<script[^>]*src="plotly.min.js"', html)
    with pytest.raises(ValueError, match="'inline', 'directory' or a path"):
        explorer.write(tmp_path / "x.html", [(0, causal_weights(), list("abcdefg"))], "x", library="cdn")


def test_folders_of_pages_share_one_copy_of_the_library_by_relative_path(tmp_path):
    shared = tmp_path / "plotly.min.js"
    for folder in ("a", "b"):
        explorer.write(tmp_path / folder / "explorers" / "p.html", [(0, causal_weights(), list("abcdefg"))], folder,
                       library=shared)
    assert sorted(p.name for p in tmp_path.rglob("*.js")) == ["plotly.min.js"]  # one copy, not one a folder
    assert shared.stat().st_size > 3_000_000 and "plotly" in shared.read_text()[:2000].lower()
    for folder in ("a", "b"):
        html = (tmp_path / folder / "explorers" / "p.html").read_text()
        assert len(html) < 500_000 and re.search(r'<script[^>]*src="\.\./\.\./plotly\.min\.js"', html)
    with pytest.raises(ValueError, match="not a .js file"):
        explorer.write(tmp_path / "x.html", [(0, causal_weights(), list("abcdefg"))], "x", library=tmp_path / "x.css")


def test_a_default_runs_explorer_stays_under_six_megabytes(tmp_path):
    """The default run: 4 layers x 4 heads, the 57-token probe, 4 probe steps (plotly.js inside)."""
    steps = [(s, causal_weights(4, 4, 57, seed=s), [chr(97 + i % 26) for i in range(57)]) for s in range(4)]
    page = explorer.write(tmp_path / "explorer.html", steps, "default")
    assert page.stat().st_size < 6_000_000


def test_head_stats_on_weights_known_by_construction():
    """Uniform causal attention: row i puts 1/(i+1) on each of its keys, entropy 1 (normalised), no future; a
    head that always reads the previous token has previous-token weight 1 and entropy 0."""
    T = 5
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    prev = np.zeros((T, T))
    prev[0, 0] = 1
    prev[np.arange(1, T), np.arange(T - 1)] = 1
    w = np.stack([uniform, prev])[None]  # (1, 2, T, T)
    st = explorer.head_stats(w)
    assert st["entropy"][0].tolist() == pytest.approx([1.0, 0.0], abs=1e-6)
    assert st["previous"][0, 0] == pytest.approx(np.mean([1 / (i + 1) for i in range(1, T)]))
    assert st["previous"][0, 1] == pytest.approx(1.0)
    assert st["first"][0, 0] == pytest.approx(np.mean([1 / (i + 1) for i in range(T)]))
    assert st["future"].tolist() == [[0.0, 0.0]]
    leaky = np.full((1, 1, T, T), 1 / T)
    assert explorer.head_stats(leaky)["future"][0, 0] == pytest.approx(np.mean([(T - 1 - i) / T for i in range(T)]))
    assert explorer.head_stats(leaky)["entropy"][0, 0] == pytest.approx(1.0)


def test_a_leaky_models_future_is_kept_and_a_causal_models_is_drawn_empty(tmp_path):
    leaky = np.full((1, 1, 4, 4), 0.25, dtype=np.float32)
    data = explorer.payload([(0, leaky, list("abcd"))], "leaky")
    assert data["causal"] is False
    fig = explorer.figure(data)
    assert np.isfinite(np.asarray(fig.data[-3].z, dtype=float)).all()  # the enlarged head: the future is drawn
    causal = explorer.figure(explorer.payload([(0, causal_weights(1, 1, 4), list("abcd"))], "causal"))
    assert np.isnan(np.asarray(causal.data[-3].z, dtype=float)[0, 1])  # above the diagonal: empty


def test_the_wandb_grid_is_one_heatmap_per_layer_and_head():
    fig = explorer.grid_figure(causal_weights(2, 3, 7), list("abcdefg"), 40)
    assert len(fig.data) == 6 and "step 40" in fig.layout.title.text
    assert "weight %{z:.3g}" in fig.data[0].hovertemplate


def test_steps_of_different_shapes_are_refused_in_one_sentence(tmp_path):
    with pytest.raises(ValueError, match="needs every step to match"):
        explorer.payload([(0, causal_weights(T=5), list("abcde")), (1, causal_weights(T=7), list("abcdefg"))], "x")
