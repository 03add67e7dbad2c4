"""Attention heatmaps: a reused (blitted) figure draws exactly what a fresh one draws."""

import numpy as np
from PIL import Image

from tinygpt.pictures.plots import AttentionFigure, LayerPlotter, masked_future


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


def test_a_causal_models_masked_future_is_drawn_empty_as_on_the_page(tmp_path):
    """Where every weight above the diagonal is 0 (a causal model) the future is NaN, drawn empty, not as weight 0;
    a leaky model's future is drawn."""
    causal = np.tril(weights(0))
    assert np.isnan(masked_future(causal)[..., 0, 1:]).all() and not np.isnan(masked_future(causal)[..., 1, :2]).any()
    leaky = weights(0)
    assert np.array_equal(masked_future(leaky), leaky)
    eye = np.eye(6, dtype=np.float32)[None, None]  # (1, 1, T, T): each query on itself, 0 below and above
    purple = [68, 1, 84]  # viridis at 0.0

    def zeros_drawn(png):
        return np.all(np.abs(pixels(png).astype(int) - purple) <= 2, axis=-1).sum()

    plain = AttentionFigure(1, 6, list("abcdef")).render(eye[0], "t", tmp_path / "plain.png")
    (drawn,) = LayerPlotter()(eye, list("abcdef"), 60, tmp_path)
    assert 0.4 < zeros_drawn(drawn) / zeros_drawn(plain) < 0.6  # 15 of the 30 zero cells are the future
