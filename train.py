"""Train a tiny GPT: `python train.py [group=option ...] [key=value ...]`, sweeps with `-m`.

What runs: Hydra composes configs/train.yaml with the command line, and tinygpt.train.run.train is the recipe (set
up, data, model, fit, the end of the run); docs/how-a-run-works.md follows one run through the code.
"""

import sys
from pathlib import Path

try:  # Ctrl-C while these load: one line, as at any later moment of starting (tinygpt.runtime.entry)
    import hydra
    from omegaconf import DictConfig

    from tinygpt.experiments import registry
    from tinygpt.runtime import entry
    from tinygpt.runtime.errors import config_composed
    from tinygpt.runtime.run_dirs import register_resolvers
    from tinygpt.train import schema
except KeyboardInterrupt:
    print("interrupted by SIGINT while starting: nothing was trained or saved.", file=sys.stderr)
    raise SystemExit(130) from None

ROOT = Path(__file__).parent
register_resolvers(project_root=ROOT)  # ${run_id:} in run dirs, ${project_root:} for the cache
schema.register_schemas()  # the config's types, each from the code that owns the settings (tinygpt/train/schema.py)
registry.register_schemas()  # each experiment's prediction type, from its folder (tinygpt/experiments/)


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float:
    from tinygpt.train.cli import run_task  # imported here so `--help` and Hydra's own errors stay fast

    config_composed()  # Hydra reports its own errors again (also done when the run starts: RunDirGuard)
    return run_task(cfg)


if __name__ == "__main__":
    entry.run(main, ROOT / "configs")  # exit statuses: one line and 2 for a mistake, 128 + n for a signal
