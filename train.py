"""Train a tiny GPT: `python train.py [group=option ...] [key=value ...]`, sweeps with `-m`."""

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float:
    from tinygpt.pipeline import train  # imported here so `--help` and config errors are fast

    summary = train(cfg)
    return summary["val_loss"]


if __name__ == "__main__":
    main()
