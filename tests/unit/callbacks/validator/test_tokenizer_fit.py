"""The zero-glue gathering of ``vocab-before-clean`` (lightning_order/callbacks/validator/tokenizer_fit.py).

tests/nanogpt.py's hand-written datamodule (``train.bin`` / ``val.bin`` windows, a
``PreTrainedTokenizerFast``) over raw pages cleaned before encoding (tests/markup.py): the BPE
trained on the raw pages is caught; trained on the cleaned train text, or elsewhere on other
pages (a supplied tokenizer), it is not. Through a Trainer: tests/integration/test_tokenizer_fit_zero_glue.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from markup import prepare_fit
from nanogpt import BinData

from lightning_order.callbacks.validator.lm import (
    sampled_token_ids,
    tokenizer_fit_violations,
    tokenizer_vocabulary,
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokenizer_fit")
    for fit_on in ("clean", "raw", "elsewhere"):
        prepare_fit(root / fit_on, fit_on)
    return {fit_on: root / fit_on for fit_on in ("clean", "raw", "elsewhere")}


def _data(folder: Path) -> BinData:
    dm = BinData(folder)
    dm.setup("fit")
    return dm


def test_a_tokenizer_trained_on_raw_pages_is_caught(folders: dict[str, Path]) -> None:
    (violation,) = tokenizer_fit_violations(_data(folders["raw"]), None, None, 512)
    assert violation.rule == "vocab-before-clean"
    assert (
        "markup-like merged entries" in violation.message
        and "clean -> split -> build_vocab" in violation.message
    )


@pytest.mark.parametrize("fit_on", ["clean", "elsewhere"])
def test_correct_tokenizers_are_silent(folders: dict[str, Path], fit_on: str) -> None:
    assert tokenizer_fit_violations(_data(folders[fit_on]), None, None, 512) == []


def test_the_raw_tokenizer_object_and_the_fast_one_read_alike(folders: dict[str, Path]) -> None:
    dm = _data(folders["raw"])
    fast = tokenizer_vocabulary(dm.tokenizer)
    raw = tokenizer_vocabulary(dm.tokenizer.backend_tokenizer)
    assert fast == raw and fast is not None
    vocab, special = fast
    assert len(vocab) == len(dm.tokenizer) and vocab[next(iter(special))] == "<|endoftext|>"


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        ((torch.tensor([[1, 2], [3, 4]]), torch.tensor([[2, 5], [4, 6]])), [1, 2, 5, 3, 4, 6]),
        ({"input_ids": torch.tensor([[7, 8]]), "labels": torch.tensor([[8, -100]])}, [7, 8]),
        ({"features": torch.zeros(2, 3)}, None),
        ((torch.zeros(2, 3), torch.zeros(2)), None),  # floating features: no token ids
    ],
)
def test_sampled_token_ids(batch: object, expected: list[int] | None) -> None:
    ids = sampled_token_ids(batch)
    assert (ids is None) if expected is None else (ids is not None and ids.tolist() == expected)


def test_no_tokenizer_no_evidence() -> None:
    assert tokenizer_fit_violations(object(), None, None, 8) == []
    assert tokenizer_vocabulary(object()) is None
