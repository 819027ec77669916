"""Strict command lines (lightning_order/cli/parsing.py): no option taken by a prefix of its name,
the nearest valid option suggested for a misspelled one, on every parser of ``lightning-order``.

Each command line here is rejected while it is parsed: nothing is prepared or trained.
"""

from __future__ import annotations

from argparse import ArgumentError
from pathlib import Path

import pytest
from helpers import DEMO, ROOT

from lightning_order.cli import main
from lightning_order.cli.parsing import (
    STRICT_PARSER,
    check_config_file,
    nearest,
    parser_options,
    suggest_for_unknown,
    with_suggestions,
)

pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
LM_DEMO = str(ROOT / "configs" / "lm-demo.yaml")
OPTIONS = ["--config", "--help", "--trainer.max_epochs", "--trainer.max_steps", "--data.vocab_size"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("--trainer.max_st", "--trainer.max_steps"),
        ("--trainer.max_stepz", "--trainer.max_steps"),
        ("--data.vocab_sise", "--data.vocab_size"),
        ("--confg", "--config"),
        ("--entirely.different", None),
    ],
)
def test_the_nearest_option_is_named(given: str, expected: str | None) -> None:
    assert nearest(given, OPTIONS) == expected


def test_every_rejected_option_gets_its_own_suggestion() -> None:
    message = "unrecognized arguments: --trainer.max_st 3 --data.vocab_sise=9 --zzz"
    assert suggest_for_unknown(message, OPTIONS) == [
        "--trainer.max_st: did you mean --trainer.max_steps?",
        "--data.vocab_sise: did you mean --data.vocab_size?",
    ]


def test_a_subclass_option_is_suggested_as_it_was_typed() -> None:
    message = (
        "Problem with given class_path 'lightning_order.OrderedCausalLM':\n  Option 'n_layr' is not accepted"
    )
    argv = ["fit", "--model.init_args.n_layr=3"]
    assert suggest_for_unknown(message, [], argv) == [
        "--model.init_args.n_layr: did you mean --model.init_args.n_layer?"
    ]


def test_parser_options_are_the_long_options_its_help_lists() -> None:
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(**STRICT_PARSER)
    parser.add_argument("--trainer.max_steps", type=int, default=1)
    parser.add_argument("-q", "--quiet-mode", action="store_true")
    assert parser_options(parser) == ["--help", "--quiet-mode", "--trainer.max_steps"]


def test_an_error_without_a_near_option_is_kept_as_it_is() -> None:
    error = ArgumentError(None, "unrecognized arguments: --zzz")
    assert with_suggestions(error, OPTIONS) is error


def _usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "usage:" not in err
    return err.splitlines()[0]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        # An abbreviation is an error (it was silently --trainer.max_steps), with the full name offered.
        (
            ["fit", "--config", DEMO, "--trainer.max_st", "3"],
            ["--trainer.max_st", "did you mean --trainer.max_steps?"],
        ),
        (["fit", "--config", LM_DEMO, "--data.vocab_sise=9"], ["did you mean --data.vocab_size?"]),
        (["fit", "--config", LM_DEMO, "--model.n_layr", "3"], ["did you mean --model.n_layer?"]),
        (["prepare", "--config", LM_DEMO, "--data.block_siz", "8"], ["did you mean --data.block_size?"]),
        (["graph", "--form", "dot"], ["lightning-order graph: error:", "did you mean --format?"]),
        (["fitt", "--config", DEMO], ["no command 'fitt'", "did you mean 'fit'?"]),
    ],
)
def test_a_misspelled_or_shortened_option_is_refused_with_the_nearest_one(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: list[str]
) -> None:
    line = _usage_error(capsys, *argv)
    for word in words:
        assert word in line, (word, line)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("data:\n  batch_size: 8\n  batch_size: 16\n", 3),
        ("trainer:\n  max_steps: 3\ntrainer:\n  max_epochs: 1\n", 3),
        ("data: {vocab_size: 100, vocab_size: 200}\n", 1),
    ],
    ids=["nested", "top-level", "flow"],
)
def test_a_config_file_writing_a_key_twice_is_refused(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    with pytest.raises(ArgumentError) as caught:
        check_config_file(path)
    assert f"config file {path}, line {line}: key" in caught.value.message


def test_a_config_file_with_merge_keys_or_distinct_keys_passes(tmp_path: Path) -> None:
    path = tmp_path / "fine.yaml"
    path.write_text("base: &base\n  batch_size: 8\ndata:\n  <<: *base\n  batch_size: 16\nmodel:\n  batch_size: 8\n")
    check_config_file(path)
    check_config_file(tmp_path / "missing.yaml")  # the parser names a missing file itself
