"""What the CLI prints for user errors (error_lines), and the tables' helpers."""

from __future__ import annotations

from argparse import ArgumentError

import pytest

from lightning_order.cli.console import (
    ConfigurationError,
    configuration_errors,
    error_lines,
    one_line,
    scalar_metrics,
)
from lightning_order.errors import DataError, LightningOrderError, OrderError
from lightning_order.rules import Violation


def test_one_line_folds_every_whitespace_run() -> None:
    assert one_line("a\n  b\t\tc \n") == "a b c"


def test_an_order_error_is_where_then_each_violation_and_its_fix() -> None:
    error = OrderError(
        [
            Violation("vocab-before-clean", ("build_vocab", "clean"), "'build_vocab' ran\nbefore 'clean'"),
            Violation("fit-before-split", ("fit_features", "split"), "learned from val", fix="split first"),
        ],
        header="2 order violations found in OrderValidator.setup (fit):\n(table)",
    )
    assert error_lines(error) == [
        "lightning-order: OrderError: 2 order violations found in OrderValidator.setup (fit)",
        "  [vocab-before-clean] 'build_vocab' ran before 'clean'",
        "    fix: build the vocabulary from the cleaned train text: clean -> split -> build_vocab",
        "  [fit-before-split] learned from val",
        "    fix: split first",
    ]


def test_other_errors_are_one_line() -> None:
    error = DataError("vocab_size must be larger than 5,\ngot 3", step="build_vocab", column="text")
    assert error_lines(error) == [
        "lightning-order: DataError: [step 'build_vocab', column 'text'] vocab_size must be larger than 5, got 3"
    ]


def test_a_rejected_command_line_keeps_only_the_message() -> None:
    error = ArgumentError(
        None, "Parser key \"data.batch_size\":\n  Expected a <class 'int'>. Got value: many"
    )
    lines = error_lines(error, "lightning-order fit")
    assert lines == [
        "lightning-order fit: error: Parser key \"data.batch_size\": Expected a <class 'int'>. Got value: many",
        "  see `lightning-order fit --help` for the options",
    ]


def test_a_constructor_refusing_its_arguments_becomes_a_lightning_order_error() -> None:
    with pytest.raises(ConfigurationError) as info, configuration_errors():
        raise ValueError("order must include split")
    assert isinstance(info.value, LightningOrderError) and isinstance(info.value, ValueError)
    assert error_lines(info.value)[0].startswith("lightning-order: ValueError: order must include split")
    with pytest.raises(DataError), configuration_errors():  # ours pass through unchanged
        raise DataError("bad", step="load")
    with pytest.raises(TypeError), configuration_errors():  # only ValueError is a refused value
        raise TypeError("a bug")


def test_scalar_metrics_keeps_single_numbers() -> None:
    torch = pytest.importorskip("torch")
    metrics = {"loss": torch.tensor(0.5), "acc": 1, "vec": torch.ones(2), "name": "x"}
    assert scalar_metrics(metrics) == {"loss": 0.5, "acc": 1.0}
