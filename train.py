"""Train a tiny GPT: `python train.py [group=option ...] [key=value ...]`, sweeps with `-m`."""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from tinygpt.experiments import registry
from tinygpt.runtime.errors import config_composed, unknown_keys_as_config_errors
from tinygpt.runtime.fast_exit import exit_without_teardown
from tinygpt.runtime.run_dirs import register_resolvers
from tinygpt.train import schema

register_resolvers(project_root=Path(__file__).parent)  # ${run_id:} in run dirs, ${project_root:} for the cache
schema.register_schemas()  # the config's types, named by configs/ (tinygpt/train/schema.py)
registry.register_schemas()  # each experiment's prediction type, from its folder (tinygpt/experiments/)


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float:
    from tinygpt.train.cli import run_task  # imported here so `--help` and Hydra's own errors stay fast

    config_composed()  # Hydra reports its own errors again (also done when the run starts: RunDirGuard)
    return run_task(cfg)


if __name__ == "__main__":
    try:
        with unknown_keys_as_config_errors(Path(__file__).parent / "configs"):  # a mistyped key or option: one
            # line, exit 2, before any work (tinygpt/runtime/errors.py)
            main()  # an error leaves through Hydra's sys.exit, with the interpreter's full teardown
    except SystemExit as stopped:
        if isinstance(stopped.code, int) and stopped.code >= 128:  # stopped by a signal, all saved: end at once,
            exit_without_teardown(stopped.code)  # no teardown in which a second Ctrl-C would kill the process
        raise
    exit_without_teardown(0)  # ~1 s less: a finished run skips freeing every module (tinygpt/fast_exit.py)
