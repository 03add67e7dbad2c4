"""Attention heatmaps: a reused (blitted) figure draws exactly what a fresh one draws."""

import numpy as np
from PIL import Image

from tinygpt.train.plots import AttentionFigure, LayerPlotter


def weights(seed: int, n_layer: int = 2, H: int = 2, T: int = 6) -> np.ndarray:
    w = np.random.default_rng(seed).random((n_layer, H, T, T)).astype(np.float32)
    return w / w.sum(-1, keepdims=True)  # rows sum to 1, like attention weights


def pixels(path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def test_a_reused_figure_draws_what_a_fresh_one_draws(tmp_path):
    labels = list("abcdef")
    plotter = LayerPlotter()
    first = plotter(weights(0), labels, 10, tmp_path / "reused")
    second = plotter(weights(1), labels, 20, tmp_path / "reused")
    fresh = LayerPlotter()(weights(1), labels, 20, tmp_path / "fresh")
    assert [p.name for p in second] == ["step000020_layer0.png", "step000020_layer1.png"]
    for a, b in zip(second, fresh, strict=True):
        assert np.array_equal(pixels(a), pixels(b))  # nothing of step 10 is left under step 20's maps
    assert not np.array_equal(pixels(first[0]), pixels(second[0]))  # other weights, other picture
    assert not np.array_equal(pixels(second[0]), pixels(second[1]))  # each layer its own


def test_a_weight_of_one_is_the_top_of_the_colormap(tmp_path):
    w = np.zeros((1, 1, 4, 4), dtype=np.float32)
    w[0, 0] = np.eye(4)  # each query on itself
    png = pixels(AttentionFigure(1, 4, list("wxyz")).render(w[0], "identity", tmp_path / "eye.png"))
    yellow = np.all(np.abs(png.astype(int) - [253, 231, 37]) <= 2, axis=-1)  # viridis at 1.0
    purple = np.all(np.abs(png.astype(int) - [68, 1, 84]) <= 2, axis=-1)  # viridis at 0.0
    assert yellow.sum() > 100 and purple.sum() > yellow.sum()  # the diagonal lit, the rest dark


def test_another_probe_gets_its_own_figure(tmp_path):
    plotter = LayerPlotter()
    plotter(weights(0, T=6), list("abcdef"), 1, tmp_path)
    first = plotter.figure
    plotter(weights(0, T=5), list("abcde"), 2, tmp_path)
    assert plotter.figure is not first and plotter.figure.key == (2, 5, tuple("abcde"))
