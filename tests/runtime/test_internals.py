"""tinygpt.runtime.internals against the installed libraries: each private name it uses is still there and still
does what the module relies on. A failure here means an upgrade changed one under us: the message names it."""

import atexit
import inspect
import threading

import pytest
import torch
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.loggers import WandbLogger
from torch import nn

from tinygpt.runtime import internals


def test_threading_and_atexit_still_have_the_exit_steps():
    steps = internals.exit_steps()
    assert steps is not None, "threading._shutdown or atexit._run_exitfuncs is gone: fast_exit falls back to sys.exit"
    assert steps == (threading._shutdown, atexit._run_exitfuncs)
    # what each does is checked end to end in a subprocess: tests/runtime/test_fast_exit.py


def test_wandb_still_reads_a_netrc_entry_for_its_host(tmp_path, monkeypatch):
    wbauth = pytest.importorskip("wandb.sdk.lib.wbauth", reason="wandb.sdk.lib.wbauth is gone: credentials "
                                 "are then never found and runs go offline")
    assert {"session_credentials", "read_netrc_auth"} <= set(dir(wbauth))
    netrc = tmp_path / "netrc"
    monkeypatch.setenv("NETRC", str(netrc))
    netrc.write_text("")
    assert internals.wandb_stored_credentials("https://api.wandb.ai") is False
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "a" * 40 + "\n")
    netrc.chmod(0o600)
    assert internals.wandb_stored_credentials("https://api.wandb.ai") is True


def test_wandb_tells_a_dataframe_apart_without_importing_pandas_once_told_to(tmp_path):
    """wandb_without_pandas: logging a wandb media value no longer imports pandas, and a DataFrame is still
    recognised as one (by its type name), in a fresh interpreter where pandas was never imported."""
    import subprocess
    import sys

    pytest.importorskip("pandas", reason="without pandas wandb never imports it")
    code = """
import sys
import wandb
import wandb.util as util
assert util.pd_available is True, "wandb.util.pd_available is gone or changed: wandb_without_pandas can go"
from tinygpt.runtime import internals
internals.wandb_without_pandas()
run = wandb.init(project="p", mode="offline", dir=sys.argv[1], settings={"quiet": True, "silent": True})
run.log({"page": wandb.Html("<p>attention</p>"), "loss": 1.0}, step=1)  # what the maps log: media, not numbers
run.finish()
assert "pandas" not in sys.modules, "logging a media value imported pandas"
import pandas
assert util.is_pandas_data_frame(pandas.DataFrame({"a": [1]})) is True  # still told apart, by its type name
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_lightning_still_passes_wandb_the_anonymous_setting_we_drop(tmp_path):
    plain = WandbLogger(project="p", save_dir=str(tmp_path), mode="offline")
    assert "anonymous" in plain._wandb_init, ("Lightning's WandbLogger no longer passes anonymous=: "
                                              "drop_wandb_anonymous can go")
    internals.drop_wandb_anonymous(plain)
    assert "anonymous" not in plain._wandb_init and plain._wandb_init["project"] == "p"


def test_lightning_still_asks_the_rich_bar_for_its_training_label():
    hook = getattr(RichProgressBar, "_get_train_description", None)
    assert hook is not None, "RichProgressBar._get_train_description is gone: the bar says 'Epoch N' again"
    assert list(inspect.signature(hook).parameters) == ["self", "current_epoch"]
    assert "_get_train_description" in inspect.getsource(RichProgressBar)  # called, not only defined

    @internals.label_train_task("train")
    class Bar(RichProgressBar):
        pass

    bar = Bar()
    assert bar._get_train_description(7) == "train".ljust(len(bar.validation_description))


def test_torch_still_keeps_module_hooks_where_the_decode_step_looks():
    layer = nn.Linear(2, 2)
    assert not internals.has_hooks(layer) and not internals.any_global_hooks()
    handle = layer.register_forward_hook(lambda *a: None)
    assert internals.has_hooks(layer), "nn.Module._forward_hooks moved: CachedStep would skip a hook"
    handle.remove()
    handle = layer.register_forward_pre_hook(lambda *a: None)
    assert internals.has_hooks(layer)
    handle.remove()
    for register in (torch.nn.modules.module.register_module_forward_hook,
                     torch.nn.modules.module.register_module_forward_pre_hook):
        handle = register(lambda *a: None)
        try:
            assert internals.any_global_hooks(), f"torch's global hook registry moved ({register.__name__})"
        finally:
            handle.remove()
    assert not internals.any_global_hooks()


def test_torch_still_has_the_dispatch_mode_that_sees_every_matrix_product():
    """float16_products.Float16Products subclasses it: inside such a mode, a product (forward and backward) reaches
    __torch_dispatch__ as an aten op."""
    import torch

    base = internals.torch_dispatch_mode()
    assert base is not None, "torch.utils._python_dispatch.TorchDispatchMode is gone"
    seen = []

    class Seen(base):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    a = torch.randn(3, 4, requires_grad=True)
    with Seen():
        (a @ torch.randn(4, 2)).sum().backward()
    assert torch.ops.aten.mm.default in seen and seen.count(torch.ops.aten.mm.default) >= 2  # forward and backward


def test_omegaconf_still_gives_the_node_behind_a_key_and_its_schema_type():
    """errors.switch_mistake reads whether the schema types a key bool from the node's class."""
    from dataclasses import dataclass, field

    from omegaconf import OmegaConf
    from omegaconf.nodes import BooleanNode, IntegerNode

    @dataclass
    class Inner:
        flag: bool = True

    @dataclass
    class Outer:
        n: int = 1
        inner: Inner = field(default_factory=Inner)

    cfg = OmegaConf.structured(Outer)
    assert isinstance(internals.config_node(cfg, "inner.flag"), BooleanNode), "DictConfig._get_node moved or changed"
    assert isinstance(internals.config_node(cfg, "n"), IntegerNode)
    assert internals.config_node(cfg, "inner.missing") is None and internals.config_node(cfg, "n.deeper") is None
