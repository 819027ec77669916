"""``lightning-order`` in process: prepare, graph, help, ``OrderCLI`` (dims linked into the model, the
``--order.*`` group), and the one-line refusals of user errors.

``fit`` end to end and the installed command: tests/integration/test_command_line.py; the DDP
config: tests/distributed/test_cli_ddp.py; audit: test_auditing.py.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from helpers import DEMO, ROOT, TINY, leaky_ledger, private_names
from pytorch_lightning.cli import SaveConfigCallback

import lightning_order.cli
from lightning_order import OrderedTextClassifier, OrderValidator, StepLedger, SymptomMonitor
from lightning_order.cli import OrderCLI, find_manifests, main
from lightning_order.order import STANDARD_PIPELINE

pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")


# -- prepare (audit: test_auditing.py) -----------------------------------------------------
def test_prepare_writes_cache_and_manifest(prepared: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifests = find_manifests(prepared)
    assert len(manifests) == 1
    ledger = StepLedger.load(manifests[0])
    assert ledger.steps()[:3] == ["load", "clean", "engineer_features"]
    assert STANDARD_PIPELINE.check(ledger) == []


# -- graph -----------------------------------------------------------------------------------
def test_graph_mermaid_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["graph"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("flowchart TD")
    for step in STANDARD_PIPELINE:
        assert f"    {step.name}[" in out
    assert "split --> fit_features" in out


def test_graph_dot_with_manifest_marks_violations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = leaky_ledger().save(tmp_path / "leaky")
    assert main(["graph", "--format", "dot", "--manifest", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("digraph pipeline {")
    assert '"split" -> "fit_features" [color="#c00000"' in out and "fit-before-split" in out
    assert "seq 4" in out  # fit_features ran at seq 4


# -- help and the order group ----------------------------------------------------------------
def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("fit", "validate", "test", "predict", "prepare", "audit", "graph"):
        assert f"  {name} " in out, name


def test_order_cli_help_lists_the_tools_beside_lightnings_subcommands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        OrderCLI(args=["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for name in ("fit", "validate", "test", "predict", "prepare", "audit", "graph"):
        assert re.search(rf"^\s+{name}\s", out, re.MULTILINE), name


def test_the_cli_reads_no_private_attribute_of_jsonargparse_lightning_or_argparse() -> None:
    from jsonargparse import ArgumentParser
    from pytorch_lightning.cli import LightningArgumentParser, LightningCLI

    foreign = private_names(
        LightningCLI, LightningArgumentParser, ArgumentParser, type(ArgumentParser().add_subcommands())
    )
    read = set()
    for module in (Path(lightning_order.cli.__file__).parent).glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in foreign:
                read.add(f"{module.name}: .{node.attr}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in foreign:
                read.add(f"{module.name}: getattr {node.value!r}")
    assert not read, sorted(read)


def _cli(tmp_path: Path, prepared: Path, *extra: str) -> OrderCLI:
    return OrderCLI(
        args=[
            "--config",
            DEMO,
            *TINY,
            "--data.cache_dir",
            str(prepared),
            "--trainer.default_root_dir",
            str(tmp_path),
            *extra,
        ],
        run=False,
    )


def test_dims_are_linked_into_the_model(tmp_path: Path, prepared: Path) -> None:
    cli = _cli(tmp_path, prepared)
    for dim in ("vocab_size", "num_features", "num_classes", "max_length"):
        assert cli.model.hparams[dim] == cli.datamodule.dims[dim] == getattr(cli.datamodule, dim)


def test_the_saved_config_holds_no_storage_options(tmp_path: Path, prepared: Path) -> None:
    """Issue #46 item 5: LightningCLI wrote storage_options (an object store's secret) to config.yaml."""
    secret = "not-for-the-log-folder"
    cli = _cli(tmp_path, prepared, "--data.storage_options", json.dumps({"key": "id", "secret": secret}))
    assert cli.datamodule.config.storage_options["secret"] == secret  # the run itself gets it
    (saver,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, SaveConfigCallback)]
    saver.setup(cli.trainer, cli.model, stage="fit")
    (written,) = Path(cli.trainer.log_dir).glob("config.yaml")
    assert "data:" in written.read_text() and secret not in written.read_text()


def test_dims_linked_without_subclass_mode(tmp_path: Path, prepared: Path) -> None:
    cli = OrderCLI(
        model_class=OrderedTextClassifier,
        subclass_mode_model=False,
        args=[*TINY, "--data.cache_dir", str(prepared), "--trainer.default_root_dir", str(tmp_path)],
        run=False,
    )
    assert cli.model.hparams.vocab_size == cli.datamodule.vocab_size


def test_order_validator_on_by_default_and_switchable(tmp_path: Path, prepared: Path) -> None:
    def validators(cli: OrderCLI) -> list[OrderValidator]:
        return [cb for cb in cli.trainer.callbacks if isinstance(cb, OrderValidator)]

    default = validators(_cli(tmp_path, prepared))
    assert len(default) == 1 and default[0].on_violation == "raise"
    assert validators(_cli(tmp_path, prepared, "--order.validate=false")) == []
    warn = validators(_cli(tmp_path, prepared, "--order.on_violation=warn"))
    assert warn[0].on_violation == "warn"
    # The user's own validator (e.g. from trainer.callbacks in a config) is not doubled.
    own = validators(
        _cli(
            tmp_path,
            prepared,
            "--trainer.callbacks+=lightning_order.OrderValidator",
            "--trainer.callbacks.on_violation=warn",
        )
    )
    assert len(own) == 1 and own[0].on_violation == "warn"


def test_symptom_monitor_on_by_default_and_switchable(tmp_path: Path, prepared: Path) -> None:
    def monitors(cli: OrderCLI) -> int:
        return sum(isinstance(cb, SymptomMonitor) for cb in cli.trainer.callbacks)

    assert monitors(_cli(tmp_path, prepared)) == 1
    assert monitors(_cli(tmp_path, prepared, "--order.symptoms=false")) == 0


def test_order_cli_refuses_the_tool_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        OrderCLI(args=["graph"])
    assert exit_info.value.code == 2
    assert "'graph' is run by the `lightning-order` command" in capsys.readouterr().err


# -- the --order.* group and dims the data sets ------------------------------------------------
def test_every_option_a_message_names_is_accepted(tmp_path: Path, prepared: Path) -> None:
    """The waste report and the overlap finding tell the user which --order.* option to pass."""
    from lightning_order.checks import check_twin_rate, estimate_waste

    texts = [estimate_waste(1), *(v.fix for v in check_twin_rate([1, 2, 3], [1, 2]))]
    options = sorted({m for text in texts for m in re.findall(r"--order\.(\w+)", text)})
    assert options == ["gpu_hour_price", "overlap_threshold", "planned_hours"]
    values = {"planned_hours": 5.0, "gpu_hour_price": 2.5, "overlap_threshold": 0.2}
    cli = _cli(tmp_path, prepared, *(f"--order.{name}={values[name]}" for name in options))
    (validator,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, OrderValidator)]
    assert {name: getattr(validator, name) for name in options} == values


@pytest.mark.parametrize("argument", ["--model.init_args.vocab_size=50", "--model.init_args.num_classes=7"])
def test_a_model_dim_the_data_sets_is_refused(
    tmp_path: Path, prepared: Path, argument: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        _cli(tmp_path, prepared, argument)
    err = capsys.readouterr().err
    assert argument.removeprefix("--") in err and "come from the data" in err


# -- user errors: one line per finding with its fix, a specific exit code, no traceback --------
def _refusal(capsys: pytest.CaptureFixture[str], *argv: str, code: int) -> list[str]:
    assert main(list(argv)) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err and "usage:" not in err
    return err.strip().splitlines()


def test_an_unexecutable_order_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    order = "--data.order=[shard,load,encode]"
    lines = _refusal(capsys, "fit", "--config", DEMO, *TINY, order, "--data.enforce=false", code=1)
    assert len(lines) == 1 and lines[0].startswith("lightning-order: ")
    assert "order" in lines[0] and "split" in lines[0] and "build_vocab" in lines[0]


def test_a_refused_order_is_one_line_per_violation_with_its_fix(capsys: pytest.CaptureFixture[str]) -> None:
    order = "--data.order=[load,build_vocab,clean,engineer_features,split,fit_features,encode,shard]"
    lines = _refusal(capsys, "fit", "--config", DEMO, *TINY, order, code=1)
    assert lines[0].startswith("lightning-order: OrderError: ") and "enforce=False" in lines[0]
    assert any(line.startswith("  [vocab-before-clean] 'build_vocab' ran") for line in lines)
    assert all(line.startswith(("lightning-order: ", "  [", "    fix: ")) for line in lines)
    assert sum(line.startswith("    fix: ") for line in lines) == sum(
        line.startswith("  [") for line in lines
    )


def test_a_data_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = str(tmp_path / "cache")
    lines = _refusal(
        capsys, "prepare", "--config", DEMO, *TINY, "--data.vocab_size=3", "--data.cache_dir", cache, code=1
    )
    assert len(lines) == 1 and lines[0].startswith("lightning-order: DataError: [step 'build_vocab']")
    assert "vocab_size" in lines[0]


@pytest.mark.parametrize("command", ["fit", "prepare"])
def test_a_dataset_name_no_builder_nor_path_is_one_line_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#26: `--data.dataset txt` is refused before anything is loaded, not after half a minute on the hub."""
    import datasets

    loads: list[str] = []

    def load(path: str, *args: object, **kwargs: object) -> None:
        loads.append(path)
        raise RuntimeError(f"datasets asked for {path!r}")

    monkeypatch.setattr(datasets, "load_dataset", load)
    monkeypatch.setattr(datasets, "load_dataset_builder", load)
    (tmp_path / "a.txt").write_text("def f():\n    return 1\n")
    lm_demo = str(Path(DEMO).with_name("lm-demo.yaml"))
    options = ["--data.dataset", "txt", "--data.data_files", str(tmp_path / "a.txt")]
    lines = _refusal(
        capsys, command, "--config", lm_demo, *options, "--data.cache_dir", str(tmp_path), code=1
    )
    assert loads == []  # refused before datasets is asked: no retries against the hub
    assert len(lines) == 1 and lines[0].startswith("lightning-order: DataError: [step 'load'] dataset='txt'")
    assert "did you mean dataset='text'?" in lines[0]
    assert not list(tmp_path.glob("*/manifest.json"))


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["fit", "--config", DEMO, "--data.batch_size=many"],
            ["lightning-order fit: error:", "data.batch_size"],
        ),
        (
            ["fit", "--config", DEMO, "--data.no_such_option=1"],
            ["lightning-order fit: error:", "no_such_option"],
        ),
        (
            ["prepare", "--config", DEMO, "--data.max_length=long"],
            ["lightning-order prepare: error:", "max_length"],
        ),
        (["audit"], ["lightning-order audit: error:", "path"]),
        (["graph", "--format", "png"], ["lightning-order graph: error:", "png"]),
    ],
)
def test_a_rejected_command_line_is_the_relevant_line_only(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: list[str]
) -> None:
    lines = _refusal(capsys, *argv, code=2)
    assert len(lines) == 2 and lines[1].startswith("  see `lightning-order")
    for word in words:
        assert word in lines[0], (word, lines[0])


# -- the LM tokenizer keys from a YAML (issue #34) --------------------------------------------
@pytest.mark.slow
def test_lm_tokenizer_and_bos_token_from_a_yaml_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``data.tokenizer`` (a local Hugging Face folder) and ``data.bos_token`` from a config: prepared,
    recorded, trained, and the tokenizer written beside the checkpoint."""
    from lm_tokenizers import llama_style_folder

    from lightning_order.data.lm.corpus import stdlib_corpus

    pytest.importorskip("transformers")
    folder = llama_style_folder(tmp_path / "llama", stdlib_corpus(200))
    config = tmp_path / "tokenizer.yaml"
    config.write_text(
        "# The LM demo with a supplied Llama-style tokenizer folder: its <s> starts every document.\n"
        f"data:\n  tokenizer: {folder}\n  eos_token: </s>\n  bos_token: auto\n"
        "  max_documents: 200\n  block_size: 16\n  num_proc: 1\n"
        f"  cache_dir: {tmp_path / 'cache'}\n",
        encoding="utf-8",
    )
    lm_demo = str(Path(DEMO).with_name("lm-demo.yaml"))
    args = ["--config", lm_demo, "--config", str(config), "--trainer.default_root_dir", str(tmp_path)]
    assert main(["prepare", *args]) == 0
    (manifest,) = find_manifests(tmp_path / "cache")
    ledger = StepLedger.load(manifest)
    vocab = ledger.latest("build_vocab")
    assert (vocab.params["tokenizer"], vocab.params["tokenizer_kind"]) == (str(folder), "folder")
    assert (vocab.params["bos_token"], ledger.latest("encode").params["bos_token"]) == ("<s>", "<s>")
    fit = ["--trainer.limit_train_batches=3", "--trainer.max_epochs=1", "--trainer.enable_progress_bar=false"]
    fit += ["--trainer.limit_val_batches=1", "--trainer.check_val_every_n_epoch=1"]  # a checkpoint at its end
    fit += ["--model.init_args.n_layer=1", "--model.init_args.n_embd=32", "--model.init_args.n_head=2"]
    assert main(["fit", *args, *fit]) == 0
    (saved,) = tmp_path.glob("**/tokenizer/tokenizer_config.json")
    assert list(saved.parent.parent.glob("*.ckpt"))  # beside the checkpoint
    capsys.readouterr()


def test_a_mesh_that_does_not_fit_the_devices_is_one_line_before_any_process_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #42: Lightning started every process first, and each one failed with a traceback."""

    def started(self: OrderCLI) -> None:
        raise AssertionError("the classes were built: the mesh was not judged while parsing")

    monkeypatch.setattr(OrderCLI, "instantiate_classes", started)
    config = str(ROOT / "configs" / "lm-sharded.yaml")
    argv = ["fit", "--config", config, "--trainer.strategy.init_args.data_parallel_size", "3"]
    assert main([*argv, "--trainer.default_root_dir", str(tmp_path)]) == 2
    (line, *_) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("lightning-order fit: error: the device mesh data_parallel_size=3")
    assert "devices=2 × num_nodes=1 starts 2 processes" in line
