"""Iterable splits read as token streams up to a budget, and the overlap found in them (#43 item 4).

lightning_order/callbacks/validator/stream_tokens.py and the ``stream-read`` branch of overlap.py:
a torchtitan-style stateful stream and ``datasets``' streaming ``IterableDataset`` with a dedup
after the split or a split after packing are caught; correct streams stay silent; reading moves
nothing. Through a real fit: tests/integration/test_stream_overlap.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from streams import TokenStream, documents, tokenize
from torch.utils.data import DataLoader, Dataset, IterableDataset

from lightning_order.callbacks.validator.overlap import overlap_check
from lightning_order.callbacks.validator.reading import read_split_tokens

BLOCK = 16


class _Streams:
    """A datamodule-like pair of loaders (what the validator reads: ``train_dataloader``, ``val_dataloader``)."""

    def __init__(self, train, val) -> None:
        self.train, self.val = train, val

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=4)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=4)


class _Windows(IterableDataset):
    """Windows of ``BLOCK + 1`` tokens of one token array, ``stride`` apart, as ``(x, y)``; ``keep``
    picks which window numbers this split holds (a split made after packing)."""

    def __init__(self, tokens: np.ndarray, stride: int, keep) -> None:
        self.tokens, self.stride, self.keep = tokens, stride, keep

    def __iter__(self):
        for n, start in enumerate(range(0, self.tokens.size - BLOCK, self.stride)):
            if self.keep(n):
                chunk = torch.from_numpy(self.tokens[start : start + BLOCK + 1].copy())
                yield chunk[:-1], chunk[1:]


class _Flat(Dataset):
    """nanoGPT's validation data: every window of ``BLOCK + 1`` tokens of one flat array (``val.bin``)."""

    def __init__(self, docs: list[str]) -> None:
        self.data = np.concatenate([tokenize(d) for d in docs])

    def __len__(self) -> int:
        return self.data.size - BLOCK

    def __getitem__(self, i: int):
        chunk = torch.from_numpy(self.data[i : i + BLOCK + 1].copy())
        return chunk[:-1], chunk[1:]


def _splits(twins: int = 0) -> tuple[list[str], list[str]]:
    """Train and validation documents split first; ``twins`` validation documents replaced by train ones
    (a dedup made after the split)."""
    docs = documents(60)
    train, val = docs[:45], docs[45:]
    for i in range(twins):
        val[i] = train[3 * i]
    return train, val


def _overlap(dm) -> tuple[str | None, list]:
    return overlap_check(dm, (None, None), None, max_rows=1000, threshold=0.01, sample_rows=512)


def _hf_stream(docs: list[str]):
    datasets = pytest.importorskip("datasets")
    ids = np.concatenate([tokenize(d) for d in docs])
    blocks = ids[: ids.size // (BLOCK + 1) * (BLOCK + 1)].reshape(-1, BLOCK + 1)
    table = {"input_ids": blocks[:, :-1].tolist(), "labels": blocks[:, 1:].tolist()}
    return datasets.Dataset.from_dict(table).to_iterable_dataset()  # what streaming=True gives


def test_a_stream_is_read_whole_as_the_tokens_it_was_cut_from_and_left_where_it_was():
    train, _ = _splits()
    stream = TokenStream(train, BLOCK)
    next(iter(DataLoader(stream, batch_size=4)))  # the run is already one batch in
    before = stream.state_dict()
    read = read_split_tokens(_Streams(stream, stream), "train")
    expected = np.concatenate([tokenize(d) for d in train])
    assert read is not None and read.whole and read.window == BLOCK + 1
    # From where the run stands: the buffer it holds, then the documents it has not read yet.
    rest = np.concatenate([before["buffer"], *[tokenize(d) for d in train[before["next_doc"] :]]])
    assert np.array_equal(read.tokens, rest[: read.tokens.size]) and rest.size - read.tokens.size <= BLOCK
    assert stream.state_dict() == before
    part = read_split_tokens(_Streams(TokenStream(train, BLOCK), None), "train", max_tokens=100)
    assert part is not None and not part.whole and 100 <= part.tokens.size < 100 + BLOCK + 1
    assert np.array_equal(part.tokens, expected[: part.tokens.size])


@pytest.mark.parametrize("shape", ["stateful", "hf-streaming"])
def test_a_dedup_after_the_split_on_a_stream_is_caught(shape):
    train, val = _splits(twins=5)
    make = (lambda docs: TokenStream(docs, BLOCK)) if shape == "stateful" else _hf_stream
    evidence, found = _overlap(_Streams(make(train), make(val)))
    assert evidence == "stream-read" and [v.rule for v in found] == ["train-val-overlap"]
    assert "against all" in found[0].message and found[0].details["train_whole"] is True


def test_a_split_after_packing_into_overlapping_windows_of_one_stream_is_caught():
    train, val = _splits()
    both = np.concatenate([tokenize(d) for d in train + val])
    dm = _Streams(_Windows(both, 1, lambda n: n % 10 != 0), _Windows(both, 1, lambda n: n % 10 == 0))
    evidence, found = _overlap(dm)
    assert evidence == "stream-read" and [v.rule for v in found] == ["train-val-overlap"]


@pytest.mark.parametrize("shape", ["stateful", "hf-streaming", "map-style-val"])
def test_correct_streams_are_silent(shape):
    train, val = _splits()
    if shape == "stateful":
        dm = _Streams(TokenStream(train, BLOCK), TokenStream(val, BLOCK))
    elif shape == "hf-streaming":
        dm = _Streams(_hf_stream(train), _hf_stream(val))
    else:
        dm = _Streams(TokenStream(train, BLOCK), list(TokenStream(val, BLOCK)))
    assert _overlap(dm) == ("stream-read", [])


def test_the_budget_is_stated_as_a_lower_bound_when_train_is_read_in_part(monkeypatch):
    import lightning_order.callbacks.validator.overlap as overlap

    train, val = _splits(twins=5)
    real = overlap.read_split_tokens
    monkeypatch.setattr(overlap, "read_split_tokens", lambda dm, split: real(dm, split, max_tokens=1500))
    evidence, found = _overlap(_Streams(TokenStream(train, BLOCK), TokenStream(val, BLOCK)))
    assert evidence == "stream-read" and found and found[0].details["train_whole"] is False
    assert "a lower bound" in found[0].message


@pytest.mark.parametrize("twins", [0, 5])
def test_a_stream_against_a_flat_validation_array_reads_the_array_once(twins):
    train, val = _splits(twins=twins)
    evidence, found = _overlap(_Streams(TokenStream(train, BLOCK), _Flat(val)))
    assert evidence == "stream-read" and [v.rule for v in found] == (["train-val-overlap"] if twins else [])
    if twins:  # every stride-1 window of val.bin once, not each window's tokens joined again
        assert found[0].details["checked"] == _Flat(val).data.size - BLOCK
