"""Every config key documented once, where its default is, and docs/configuration.md generated from it."""

import pytest
from omegaconf import OmegaConf

from helpers import ROOT, compose_train, corpus_overrides
from tinygpt.cli import config_keys
from tinygpt.data.corpus import CORPORA
from tinygpt.cli.config_keys import read_configs, read_file, split_comment, undocumented

CONFIGS = ROOT / "configs"


def leaf_keys(cfg) -> set[str]:
    """The dotted names of a composed config's values (no _target_, no list items)."""
    out = set()

    def walk(node, prefix):
        for k, v in node.items():
            name = f"{prefix}{k}"
            if str(k).startswith("_"):
                continue
            if isinstance(v, dict):
                walk(v, name + ".")
            else:
                out.add(name)

    walk(OmegaConf.to_container(cfg, resolve=False), "")
    return out


def test_a_comment_is_split_off_but_a_hash_inside_quotes_is_text():
    assert split_comment(" 4   # four layers") == ("4", "four layers")
    assert split_comment(' "a # b"  # the text') == ('"a # b"', "the text")
    assert split_comment(" [0.9, 0.99]") == ("[0.9, 0.99]", "")
    assert split_comment("  # a mapping's comment") == ("", "a mapping's comment")


def test_keys_nest_and_take_the_comment_on_their_line_or_right_above(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text("# the option\n"
                    "defaults:\n  - base\n"
                    "top: 1   # on its line\n"
                    "# above it,\n# in two lines\n"
                    "block:\n"
                    "  _target_: x.Y\n"
                    "  inner: true  # nested\n"
                    "\n"
                    "  bare: 2\n")
    header, keys = read_file(path, "grp")
    assert header == "the option"
    found = {k.name: k.doc for k in keys}
    assert found == {"grp.top": "on its line", "grp.block": "above it, in two lines", "grp.block.inner": "nested",
                     "grp.block.bare": ""}
    assert undocumented(keys) == ["grp.block.bare"]  # the mapping is documented by its keys, a value by itself


def test_every_key_of_a_run_is_read_from_the_files():
    names = {k.name for k in read_configs(CONFIGS)[1]}
    for overrides in ([], *(corpus_overrides(source) for source in CORPORA), ["trainer=fsdp"]):
        missing = leaf_keys(compose_train(overrides)) - names
        assert not {m for m in missing if not m.startswith("hydra")}, (overrides, missing)


def test_every_key_is_documented():
    assert undocumented(read_configs(CONFIGS)[1]) == []


def test_the_configuration_page_is_generated_from_the_comments():
    page = ROOT / "docs" / "configuration.md"
    assert page.read_text() == config_keys.markdown(CONFIGS), "run python scripts/config_keys.py"
    assert config_keys.main(["--check"]) == 0


@pytest.mark.parametrize("key", ["model.n_layer", "callbacks.leak_alarm.tolerance", "callbacks.stability.future_leak",
                                 "callbacks.divergence_guard.factor", "data.train_fraction", "data.val_batch_size",
                                 "data.overfit", "corpus.n_tokens", "init_from", "diagnostics.max_val_tokens"])
def test_the_keys_once_missing_from_the_docs_are_there(key):
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert f"| `{key}` |" in page
