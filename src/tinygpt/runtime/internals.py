"""Every use of another library's private names, in one place: each for a behaviour no public API gives, with why
it is worth the risk. ``tests/runtime/test_internals.py`` checks each against the installed library and fails
loudly, naming the name, when an upgrade removes or changes it; the code here falls back to the plain behaviour
(no crash) when a name is missing.

- ``threading._shutdown``, ``atexit._run_exitfuncs``: train.py ends without the interpreter's teardown of every
  module (runtime/fast_exit.py), after doing what exiting must do, in the interpreter's own order.
- ``wandb.sdk.lib.wbauth``: whether wandb has stored credentials, without wandb.login's network call (a run
  without any goes offline at once instead of waiting for a login that cannot happen).
- ``wandb.util.pd_available``: wandb imports pandas (and pyarrow with it: 61 MiB and about 0.5 s here) the first
  time a run logs anything but a number or a string, only to ask whether that value is a DataFrame; tinygpt logs
  none, and wandb's own fallback (the value's type name) answers the same for one. Turned off, a default run's
  peak memory drops by that much (docs/benchmarks.md).
- ``WandbLogger._wandb_init``: Lightning always passes wandb.init ``anonymous=``, a setting wandb deprecated and
  warns about on every run; it is taken out before the run starts.
- ``RichProgressBar._get_train_description``: Lightning labels its bar "Epoch N"; training here is step-based,
  one endless epoch, and there is no public hook for the label.
- ``torch.utils._python_dispatch.TorchDispatchMode``: float16 products on a CPU computed as a GPU computes them
  (train/float16_products.py) need every matrix product caught below autograd, the backward's too; torch has no
  public class for that. Without it a float16 run on the CPU uses torch's own (slow, reference) float16 kernel.
- ``DictConfig._get_node``: the node behind a key (BooleanNode, IntegerNode, ...), which says what type the schema
  gave the key; OmegaConf's public API returns values only. Without it a word given to a switch (``compile=yes``,
  which OmegaConf reads as true) is not refused (runtime/errors.py, ``switch_mistake``).
- torch modules' ``_forward_hooks`` / ``_forward_pre_hooks`` and the global hook registries: the lean decode step
  (sampling/generate.py, ``CachedStep``) skips the modules' forward, so it must not run where a hook would have.
"""

from __future__ import annotations

import atexit
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nothing heavy at import: train.py imports this module before its --help
    from torch import nn


def exit_steps():
    """(join the non-daemon threads, run the atexit handlers), what a normal exit does first; None when this
    Python lacks either."""
    join_threads = getattr(threading, "_shutdown", None)
    run_atexit = getattr(atexit, "_run_exitfuncs", None)
    if join_threads is None or run_atexit is None:
        return None
    return join_threads, run_atexit


def wandb_stored_credentials(base_url: str) -> bool:
    """A session login or a .netrc entry for wandb's host (the lookup wandb.login does before its network call);
    False when this wandb lacks the module."""
    try:
        from wandb.sdk.lib import wbauth
    except ImportError:
        return False
    return bool(wbauth.session_credentials(host=base_url) or wbauth.read_netrc_auth(host=base_url))


def wandb_without_pandas() -> None:
    """wandb tells a DataFrame by its type name rather than by importing pandas to check (the same answer: see the
    module's docstring). Nothing happens when this wandb lacks the flag."""
    from wandb import util

    if hasattr(util, "pd_available"):
        util.pd_available = False


def drop_wandb_anonymous(logger) -> None:
    """Take ``anonymous`` out of the arguments a Lightning WandbLogger will pass wandb.init."""
    init = getattr(logger, "_wandb_init", None)
    if isinstance(init, dict):
        init.pop("anonymous", None)


def label_train_task(label: str):
    """A class decorator for a subclass of Lightning's RichProgressBar: its training task is labelled ``label``
    (padded to the validation label's width) instead of "Epoch N"."""

    def decorate(cls):
        def _get_train_description(self, current_epoch: int) -> str:
            return f"{label:{len(self.validation_description)}}"

        cls._get_train_description = _get_train_description
        return cls

    return decorate


def has_hooks(module: nn.Module) -> bool:
    """Whether a forward or forward-pre hook is registered on this module."""
    return bool(getattr(module, "_forward_hooks", None) or getattr(module, "_forward_pre_hooks", None))


def any_global_hooks() -> bool:
    """Whether a global module hook is registered (torch.nn.modules.module.register_module_forward_hook and
    its pre-hook twin)."""
    from torch.nn.modules import module as torch_module

    return bool(getattr(torch_module, "_global_forward_hooks", None)
                or getattr(torch_module, "_global_forward_pre_hooks", None))


def torch_dispatch_mode() -> type | None:
    """torch's TorchDispatchMode, the base of a mode that sees every op below autograd; None when this torch lacks
    it."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        return None
    return TorchDispatchMode


def config_node(config, key: str):
    """The OmegaConf node at dotted ``key`` of a DictConfig (its class says the schema's type: BooleanNode, ...); None
    where the config has no such key, and for every key when this OmegaConf lacks ``_get_node``."""
    from omegaconf import DictConfig

    node = config
    for part in key.split("."):
        get = getattr(node, "_get_node", None)
        if not isinstance(node, DictConfig) or get is None or part not in node.keys():
            return None
        node = get(part)
    return node
