"""The attention explorer as a person uses it: a real run's page opened from file:// in headless Chromium with the
network off, a cell hovered, the step slider moved; and scripts/attention.py on causal and leaky checkpoints."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import ROOT, TINY, run_train

CHROMIUM = next((p for p in (os.environ.get("TINYGPT_CHROMIUM"), shutil.which("chromium"),
                             shutil.which("chromium-browser"), shutil.which("google-chrome")) if p), None)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, corpus_file, cache_dir):
    """A causal and a leaky tiny run (20 steps, attention at steps 10 and 20)."""
    root = tmp_path_factory.mktemp("explorer_runs")
    out = {}
    for name, causal in (("causal", "true"), ("leaky", "false")):
        out[name] = root / name
        run_train([*TINY, "corpus=text_file", f"corpus.path={corpus_file}", f"data.cache_dir={cache_dir}",
                   "logger=csv", f"model.attn.causal={causal}", f"hydra.run.dir={out[name]}"])
    return out


def attention(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "attention.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (apt-get install chromium; .ci/run installs it)")
def test_the_runs_explorer_works_offline_in_a_real_browser(runs, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e .[test])")
    page_file = runs["causal"] / "attention" / "explorer.html"
    with np.load(runs["causal"] / "attention" / "step000020.npz") as z:
        saved, labels = z["weights"], [str(c) for c in z["labels"]]
    q, k = 9, 4  # a cell below the diagonal of layer 0, head 0
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(offline=True, viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_file.as_uri())
        page.wait_for_function("window.tinygptExplorer !== undefined", timeout=30_000)
        assert "step 20, layer 0, head 0" in page.locator(".gtitle").text_content()
        # hover the enlarged head's cell (q, k) with the mouse
        x, y = page.evaluate(f"""() => {{
            const gd = document.querySelector('.js-plotly-plot'), fl = gd._fullLayout;
            const n = fl._subplots.cartesian.length - 1;  // the enlarged head's axes: the second to last pair
            const xa = fl['xaxis' + n], ya = fl['yaxis' + n], box = gd.getBoundingClientRect();
            return [box.left + xa._offset + xa.l2p({k}), box.top + ya._offset + ya.l2p({q})];
        }}""")
        page.mouse.move(x, y)
        tip = page.locator(".hovertext").first
        tip.wait_for(timeout=10_000)
        text = tip.text_content()
        assert f"query {q} {labels[q]}" in text and f"key {k} {labels[k]}" in text
        shown = float(re.search(r"weight ([0-9.e-]+)", text).group(1))
        assert shown == pytest.approx(float(f"{saved[0, 0, q, k]:.3g}"), abs=1e-12)
        # drag the step slider to its start: the title follows
        grip = page.locator(".slider-grip-rect").first.bounding_box()
        rail = page.locator(".slider-rail-rect").first.bounding_box()
        page.mouse.move(grip["x"] + grip["width"] / 2, grip["y"] + grip["height"] / 2)
        page.mouse.down()
        page.mouse.move(rail["x"] + 2, grip["y"] + grip["height"] / 2, steps=8)
        page.mouse.up()
        page.wait_for_function("document.querySelector('.gtitle').textContent.includes('step 10')", timeout=10_000)
        shot = tmp_path / "explorer.png"
        page.screenshot(path=str(shot), full_page=True)
        if os.environ.get("TINYGPT_SCREENSHOT"):  # how docs/images/explorer.png is made
            shutil.copy(shot, os.environ["TINYGPT_SCREENSHOT"])
        browser.close()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert errors == []


@pytest.mark.slow
def test_the_script_draws_any_text_through_causal_and_leaky_checkpoints(runs, tmp_path):
    for name in ("causal", "leaky"):
        out = tmp_path / f"{name}.html"
        proc = attention("--ckpt", runs[name], "--text", "To be, or not to be" + "!" * 40 + "€", "--out", out,
                         "--png", tmp_path / name)
        assert proc.returncode == 0, proc.stderr
        assert "clipped to the model's block_size 16" in proc.stderr
        data = json.loads(re.search(r"const D = (\{.*?\});\n", out.read_text(), re.S).group(1))
        assert data["T"] == 16 and data["labels"][:6] == ["T", "o", "␣", "b", "e", ","]
        assert data["causal"] is (name == "causal")  # the leaky model's future weights are drawn
        assert len(list((tmp_path / name).glob("*.png"))) == 2  # one per layer
    proc = attention("--ckpt", runs["causal"], "--text", "ab€", "--out", tmp_path / "unk.html")
    assert proc.returncode == 0 and "'€' not in the vocabulary" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args, says", [
    (["--ckpt", "{tmp}/nowhere", "--text", "hi"], "does not exist"),
    (["--ckpt", "{causal}", "--text", ""], "--text is empty"),
    (["--ckpt", "{tmp}/junk.ckpt", "--text", "hi"], "checkpoint"),
])
def test_bad_input_is_one_line_and_exit_2(runs, tmp_path, args, says):
    (tmp_path / "junk.ckpt").write_text("not a checkpoint")
    proc = attention(*[a.format(tmp=tmp_path, causal=runs["causal"]) for a in args])
    assert proc.returncode == 2 and says in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
