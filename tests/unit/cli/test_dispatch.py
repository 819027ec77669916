"""``lightning_order.cli.dispatch``: the light entry point (the lazy public API: tests/unit/test_public_api.py).

``--help``, ``audit``, ``graph`` and ``prepare`` (of a plain ``OrderedDataModule`` config) answer
without importing torch or Lightning, and ``prepare`` reaches the very cache the LightningCLI path
and the DataModule name; whatever the light path cannot read goes to LightningCLI.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import DEMO, ROOT, TINY, in_fresh_process

from lightning_order.cli import dispatch as commands
from lightning_order.data.engine.cache import is_complete

_HEAVY = ("torch", "pytorch_lightning", "lightning")
#: What a cache hit of the light `prepare` does not import either (only preparing reads data).
_DATA = ("datasets",)


def test_help_lists_every_subcommand(capsys):
    assert commands.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("fit", "validate", "test", "predict", "prepare", "audit", "graph"):
        assert f"  {name} " in out


def test_light_commands_import_neither_torch_nor_lightning(prepared: Path):
    code = f"""
import contextlib, io, json, sys
from lightning_order.cli.dispatch import main
codes = {{}}
with contextlib.redirect_stdout(io.StringIO()):
    codes["help"] = main(["--help"])
    codes["graph"] = main(["graph"])
    codes["audit"] = main(["audit", {str(prepared)!r}])
    codes["prepare"] = main(["prepare", "--config", {DEMO!r}, *{TINY!r}, "--data.cache_dir", {str(prepared)!r}])
import lightning_order
heavy = [m for m in {_HEAVY + _DATA!r} if m in sys.modules]
print(json.dumps({{"codes": codes, "heavy": heavy}}))
"""
    result = in_fresh_process(code)
    assert result["codes"] == {"help": 0, "graph": 0, "audit": 0, "prepare": 0}
    assert result["heavy"] == []


def test_light_prepare_reuses_the_cache_lightningcli_wrote(prepared: Path, capsys):
    before = sorted(p.name for p in prepared.iterdir())
    assert commands.main(["prepare", "--config", DEMO, *TINY, "--data.cache_dir", str(prepared)]) == 0
    assert sorted(p.name for p in prepared.iterdir()) == before  # no second preparation
    out = capsys.readouterr().out
    assert "prepared data:" in out and "no violation" in out


def test_light_prepare_names_the_datamodule_cache(tmp_path: Path):
    from lightning_order import OrderedDataModule

    args = ["--data.demo_size=300", "--data.vocab_size=200", "--data.max_length=16", "--data.seed=3"]
    assert commands.main(["prepare", *args, "--data.cache_dir", str(tmp_path)]) == 0
    dm = OrderedDataModule(demo_size=300, vocab_size=200, max_length=16, seed=3, cache_dir=str(tmp_path))
    assert is_complete(dm.cache_path, dm.cache_key)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == [dm.cache_key]


def _lightning_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """What ``main`` hands to LightningCLI (``run`` replaced: nothing is parsed there)."""
    import lightning_order.cli.lightning

    seen: list[tuple] = []

    def run(args, spec, *, prepare=False, prog):
        seen.append((args, spec.name, prepare))

    monkeypatch.setattr(lightning_order.cli.lightning, "run", run)
    return seen


@pytest.mark.parametrize(
    "argv",
    [
        ["prepare", "--data.class_path=my.Module"],
        ["prepare", "--data", "my.Module"],
        ["fit", "--config", DEMO],
    ],
)
def test_a_named_datamodule_class_and_training_go_to_lightningcli(argv, monkeypatch):
    seen = _lightning_runs(monkeypatch)
    assert commands.main(argv) == 0
    expected = (argv[1:], "standard", True) if argv[0] == "prepare" else (argv, "standard", False)
    assert seen == [expected]


@pytest.mark.parametrize(
    ("argv", "code", "stream", "words"),
    [
        (
            ["prepare", "--help"],
            0,
            "out",
            ["lightning-order prepare", "--data.val_fraction", "Run the data pipeline only"],
        ),
        (["prepare", "--print_config"], 0, "out", ["data:", "val_fraction:"]),
        (["prepare", "--config", DEMO, "--data.max_length=long"], 2, "err", ["data.max_length", "long"]),
        (["prepare", "--data.max_lenght=3"], 2, "err", ["did you mean --data.max_length?"]),
        (["prepare", "--data.val_fraction=2"], 1, "err", ["DataError", "[step 'split']", "val_fraction"]),
    ],
)
def test_prepare_is_parsed_once_by_its_own_parser(argv, code, stream, words, monkeypatch, capsys):
    seen = _lightning_runs(monkeypatch)
    assert commands.main(argv) == code
    assert seen == []  # never parsed a second time by LightningCLI
    shown = getattr(capsys.readouterr(), stream)
    assert "Traceback" not in shown
    for word in words:
        assert word in shown, (word, shown)


def test_light_prepare_takes_the_lm_pipeline_too(tmp_path: Path, capsys):
    lm_config = str(ROOT / "configs" / "lm-demo.yaml")
    small = ["--data.max_documents=150", "--data.vocab_size=300", "--data.block_size=16"]
    assert commands.main(["prepare", "--config", lm_config, *small, "--data.cache_dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no violation" in out
    for figure in ("documents: 150 loaded", "duplicates removed: ", "tokens: ", "end-of-text: ", "blocks: "):
        assert figure in out, figure  # the LM figures under the ledger (#26)
    from lightning_order import OrderedLMDataModule

    dm = OrderedLMDataModule(
        max_documents=150, vocab_size=300, block_size=16, batch_size=16, cache_dir=str(tmp_path)
    )
    assert is_complete(dm.cache_path, dm.cache_key)  # the light path named the DataModule's cache


def test_audit_usage_error_is_one_line_and_exit_code_2(capsys):
    assert commands.main(["audit"]) == 2
    assert "lightning-order audit" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("init_args", [True, False])
def test_prepare_refuses_a_class_path_data_files_as_fit_does(tmp_path: Path, monkeypatch, capsys, init_args):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("a file of the working directory, never named\n")
    spec = "    class_path: os.system\n" + ("    init_args:\n      command: echo hi\n" if init_args else "")
    config = tmp_path / "c.yaml"
    config.write_text(
        "model:\n  class_path: lightning_order.OrderedCausalLM\n"
        f"data:\n  dataset: text\n  cache_dir: {tmp_path / 'cache'}\n  data_files:\n{spec}"
    )
    codes, errors = [], []
    for command in ("fit", "prepare"):
        codes.append(commands.main([command, "--config", str(config)]))
        errors.append(capsys.readouterr().err.replace(f"lightning-order {command}", "lightning-order"))
    # With init_args the value fits no type of data_files: a usage error (2) from either parser;
    # a bare class_path passes the parser and is refused by the config (1).
    assert codes[0] != 0 and codes[1] == (2 if init_args else 1)
    for error in errors:  # refused, naming the option and the class as given
        assert error.startswith("lightning-order") and "Traceback" not in error
        assert "data_files" in error and "os.system" in error  # never flattened away into "no data_files"
    if not init_args:
        assert errors[1].startswith("lightning-order: DataError: [step 'load'] data.data_files names a class")
    cache = tmp_path / "cache"
    assert not cache.exists() or all(p.name.endswith(".lock") for p in cache.iterdir())  # nothing prepared


# -- what the command line is told about its config files and its pipeline (issue #42) -------------
@pytest.mark.parametrize("command", ["prepare", "fit"])
@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is empty (nothing but blanks or comments)"),
        ("# only a comment\n", "is empty (nothing but blanks or comments)"),
        (
            "data:\n  batch_size: 8\n  batch_size: 16\n",
            "line 3: key 'batch_size' is written twice in the same section (lines 2 and 3)",
        ),
    ],
    ids=["empty", "comments-only", "key-twice"],
)
def test_an_empty_config_or_a_key_written_twice_is_refused_naming_the_file(
    tmp_path: Path, capsys, command: str, text: str, says: str
):
    config = tmp_path / "run.yaml"
    config.write_text(text)
    assert commands.main([command, "--config", str(config), "--print_config"]) == commands.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"config file {config}" in err and says in err and "Unexpected config" not in err


@pytest.mark.parametrize("command", ["prepare", "fit"])
def test_an_option_of_the_other_pipeline_names_the_pipeline_that_runs(capsys, command: str):
    assert commands.main([command, "--data.block_size", "8", "--print_config"]) == commands.EXIT_USAGE
    err = capsys.readouterr().err
    assert "--data.block_size is an option of the 'lm' pipeline" in err
    assert "this command runs the 'standard' pipeline (the default, as no model is named)" in err
    assert "--model lightning_order.OrderedCausalLM" in err
    assert "did you mean --data.vocab_size" not in err  # the option is right, the pipeline is not


_USER_MODELS = '''
import torch


class GPT2(torch.nn.Module):
    def __init__(self, vocab_size: int, padded_vocab_size: int, block_size: int, n_layer: int = 2):
        super().__init__()


class Tagger(torch.nn.Module):
    def __init__(self, vocab_size: int, num_features: int, num_classes: int, max_length: int = 64):
        super().__init__()


class Other(torch.nn.Module):
    def __init__(self, width: int = 3):
        super().__init__()
'''


@pytest.mark.parametrize(("name", "pipeline"), [("GPT2", "lm"), ("Tagger", "standard"), ("Other", "standard")])
def test_a_model_of_ones_own_runs_the_pipeline_whose_dims_it_takes(tmp_path, monkeypatch, name, pipeline):
    """A LightningModule of one's own (a transformers wrapper) names no pipeline by its class: its
    constructor does, by the dims it takes (the dims are linked into it from the data)."""
    (tmp_path / "guide_user_models.py").write_text(_USER_MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["fit", "--model.class_path", f"guide_user_models.{name}"]
    assert commands.spec_of_command(argv[1:]).name == pipeline


_HF_WRAPPER = '''
import pytorch_lightning as pl


class GPT2(pl.LightningModule):
    """A transformers wrapper's constructor: the LM dims, then options of its own."""

    def __init__(self, vocab_size: int, padded_vocab_size: int, block_size: int, n_layer: int = 2):
        super().__init__()
'''


def test_lightningcli_takes_a_model_of_ones_own_that_takes_the_dims(tmp_path, monkeypatch, capsys):
    """``model.class_path`` may name any LightningModule whose constructor takes the pipeline's dims,
    not only a subclass of the pipeline's own model (it was refused: 'not a subclass of OrderedCausalLM')."""
    (tmp_path / "guide_hf_wrapper.py").write_text(_HF_WRAPPER)
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["fit", "--model.class_path", "guide_hf_wrapper.GPT2", "--model.init_args.n_layer", "3"]
    with pytest.raises(SystemExit) as stop:  # --print_config prints and exits, as LightningCLI does
        commands.main([*argv, "--data.block_size", "32", "--print_config"])
    assert stop.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "class_path: guide_hf_wrapper.GPT2" in printed and "n_layer: 3" in printed
    assert "block_size: 32" in printed  # an option of the LM pipeline's data: that pipeline runs
