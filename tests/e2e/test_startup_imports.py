"""What `python train.py` has imported when its first training step begins: nothing heavy beyond what
`import lightning` itself imports (Lightning's torchmetrics imports transformers, scipy and matplotlib where they
are installed: the floor of any Lightning program), no report code, and no `datasets` once the token cache is warm
(issue 45: the start-up within 1.5 s of that floor; the timing itself is scripts/benchmark.py's)."""

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT

HEAVY = ("transformers", "scipy", "matplotlib", "plotly", "pandas", "pyarrow", "datasets", "sklearn", "wandb")

# Records sys.modules when tinygpt's step clock sees the first training step begin, then lets train.py run on.
AT_FIRST_STEP = """
import json, runpy, sys
from tinygpt.train import progress
out, root, args = sys.argv[1], sys.argv[2], sys.argv[3:]
begin = progress.StepClock.on_train_batch_start
def first_step(self, *a, **k):
    if self.first_step_at is None:
        with open(out, "w") as f:
            json.dump(sorted(sys.modules), f)
    return begin(self, *a, **k)
progress.StepClock.on_train_batch_start = first_step
sys.argv = [f"{root}/train.py", *args]
runpy.run_path(f"{root}/train.py", run_name="__main__")
"""


def modules_at_first_step(tmp_path, name: str, *args: str) -> set[str]:
    script, out = tmp_path / "at_first_step.py", tmp_path / f"{name}.json"
    script.write_text(AT_FIRST_STEP)
    proc = subprocess.run([sys.executable, str(script), str(out), str(ROOT), *args,
                           f"hydra.run.dir={tmp_path / name}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "WANDB_MODE": "offline"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return set(json.loads(out.read_text()))


@pytest.mark.slow
def test_the_first_step_begins_with_nothing_heavy_imported_beyond_lightnings_own(tmp_path):
    cache = f"data.cache_dir={tmp_path / 'cache'}"
    cold = modules_at_first_step(tmp_path, "cold", "debug=fast", cache)  # the default recipe, its cache written
    warm = modules_at_first_step(tmp_path, "warm", "debug=fast", cache)  # as every later run starts
    lightning = set(json.loads(subprocess.run(
        [sys.executable, "-c", "import json, sys, lightning; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True).stdout))
    beyond = {m.split(".")[0] for m in warm - lightning}
    assert not beyond & set(HEAVY), sorted(beyond & set(HEAVY))
    assert not any(m.startswith(("tinygpt.analysis", "tinygpt.bench", "tinygpt.verify")) for m in warm)
    assert "datasets" not in warm and "datasets" in cold  # the cache spares a warm start `datasets`
    assert "tinygpt.train.step_losses" in warm  # (the record is taken inside a real run's first step)
