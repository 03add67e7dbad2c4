"""Train a tiny GPT: `python train.py [group=option ...] [key=value ...]`, sweeps with `-m`."""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from tinygpt.runs import register_resolvers

register_resolvers(project_root=Path(__file__).parent)  # ${run_id:} in run dirs, ${project_root:} for the cache


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float:
    from tinygpt.cli import run_task  # imported here so `--help` and Hydra's own errors stay fast

    return run_task(cfg)


if __name__ == "__main__":
    main()
