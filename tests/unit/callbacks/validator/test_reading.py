"""lightning_order/callbacks/validator/reading.py: reading a run's data without changing it, within its budgets.

The validator's reads bounded by tokens and bytes, and nothing read held after step 1 (issue #42, item 8).

Reading a stream without consuming it.

Iterable splits read as token streams up to a budget, and the overlap found in them (#43 item 4).

The stream read (``read_split_tokens``) and the ``stream-read`` branch of overlap.py:
a torchtitan-style stateful stream and ``datasets``' streaming ``IterableDataset`` with a dedup
after the split or a split after packing are caught; correct streams stay silent; reading moves
nothing. Through a real fit: tests/integration/test_stream_overlap.py.
"""

from __future__ import annotations

import gc
import io
import itertools
import random
import weakref
from typing import Any

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from streams import (
    VOCAB,
    CountingStream,
    GetBatch,
    TinyModel,
    TokenStream,
    batch_hash,
    documents,
    token_array,
    tokenize,
)
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler, Sampler

from lightning_order import OrderValidator
from lightning_order.callbacks.validator.content import summarize_splits
from lightning_order.callbacks.validator.overlap import overlap_check
from lightning_order.callbacks.validator.reading import (
    READ_BYTES,
    READ_TOKENS,
    WHOLE_BYTES,
    WHOLE_TOKENS,
    item_size,
    peek_batches,
    read_split_tokens,
    readable,
    rows_within,
    sample_batch,
    untouched,
)

#: Long rows: 32k token ids (the issue's case).
TOKENS = 1 << 15


class _LongRows(Dataset):
    """``count`` rows of :data:`TOKENS` ids; every item it hands out is recorded (weakly) in ``made``."""

    def __init__(self, count: int, made: list[Any]) -> None:
        self.count, self.made = count, made
        self.row = torch.arange(TOKENS + 1, dtype=torch.int32) % VOCAB

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = (self.row + i) % VOCAB
        self.made.append(weakref.ref(ids))
        return {"input_ids": ids[:-1], "labels": ids[1:].long()}


class _Data(pl.LightningDataModule):
    def __init__(self, dataset: Dataset) -> None:
        super().__init__()
        self.dataset = dataset

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=2)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=2)


def _alive(made: list[Any]) -> int:
    return sum(ref() is not None for ref in made)


def test_rows_within_the_budgets() -> None:
    assert rows_within(item_size({"input_ids": torch.zeros(TOKENS, dtype=torch.int32)}), 10_000) == (
        READ_TOKENS // TOKENS
    )
    assert rows_within(item_size(torch.zeros(1 << 20, dtype=torch.float32)), 10_000) == READ_BYTES // (
        4 << 20
    )
    assert rows_within(item_size(torch.zeros(1 << 30, dtype=torch.int8)[:0]), 7) == 7
    assert rows_within((1 << 40, 0), 7) == 1  # one row at least, however large


def test_a_sample_of_long_rows_is_cut_to_the_token_budget() -> None:
    made: list[Any] = []
    batch, size = sample_batch(_Data(_LongRows(600, made)), "train_dataloader", 512)
    # Two keys of TOKENS ids each: the tokens budget holds READ_TOKENS // (2 * TOKENS) rows.
    expected = READ_TOKENS // (2 * TOKENS)
    assert expected < 512 and size == 600 and batch["input_ids"].shape[0] == expected
    assert len(made) <= expected + 1  # and the row that sized the read


def test_a_split_whose_items_pass_the_whole_split_budget_is_sampled() -> None:
    dm, common = _Data(_LongRows(40, [])), {"train": 40, "val": 40}
    assert summarize_splits(dm, common, sample_rows=8, whole_rows=100)["train"]["whole"]
    # 40 rows whose first item holds a fortieth of the budget and one token more: sampled, 8 rows.
    large = (WHOLE_BYTES // 40, WHOLE_TOKENS // 40 + 1)
    summary = summarize_splits(
        dm, common, sample_rows=8, whole_rows=100, items={"train": large, "val": large}
    )
    assert not summary["train"]["whole"] and len(summary["train"]["inputs"]) == 8


class _Peak(pl.Callback):
    """The most dataset items alive at once while the validator reads, and those alive after step 1."""

    def __init__(self, made: list[Any]) -> None:
        self.made, self.after_step_1 = made, None

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx == 0:
            del outputs, batch
            gc.collect()
            self.after_step_1 = _alive(self.made)


class _Counting(_LongRows):
    """:class:`_LongRows` that also records the most of its items alive at once."""

    peak = 0

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        item = super().__getitem__(i)
        type(self).peak = max(type(self).peak, _alive(self.made))
        return item


def test_the_validator_holds_at_most_its_budgets_and_nothing_after_step_1(tmp_path) -> None:
    made: list[Any] = []
    _Counting.peak = 0
    dataset = _Counting(300, made)
    peak = _Peak(made)
    # Both splits are the one dataset: every validation token is train's (a slice shared at the cut
    # since #43), so the overlap verdict is left out; its reads are measured all the same.
    validator = OrderValidator(overlap_threshold=1.0)
    trainer = quiet_trainer(tmp_path, [validator, peak], max_steps=2, limit_val_batches=0)
    trainer.fit(TinyModel(), _Data(dataset))
    per_read = READ_TOKENS // (2 * TOKENS)
    # One chunk being hashed and the rows kept for statistics, never the whole split at once.
    assert 0 < _Counting.peak <= 2 * per_read + 2
    # What the run's own loader holds (the batch being trained, one prefetched) and nothing else.
    assert peak.after_step_1 is not None and peak.after_step_1 <= 4


def _first(loader: DataLoader, count: int = 3) -> list[str]:
    return [batch_hash(b) for b in itertools.islice(loader, count)]


def _loaders(make) -> tuple[DataLoader, DataLoader]:
    return make(), make()


def test_a_stateful_stream_is_read_and_put_back() -> None:
    read, fresh = _loaders(lambda: DataLoader(TokenStream(documents()), batch_size=4))
    peeked = peek_batches(read, 12)
    assert len(peeked) == 3 and read.dataset.next_doc == 0 and read.dataset.buffer == []
    assert [batch_hash(b) for b in peeked] == _first(read) == _first(fresh)


def test_a_stream_without_state_dict_is_read_through_a_copy() -> None:
    read, fresh = _loaders(lambda: DataLoader(CountingStream(documents()), batch_size=4))
    assert len(peek_batches(read, 8)) == 2
    assert read.dataset.next_doc == 0 and read.dataset.buffer == []
    assert _first(read) == _first(fresh)


def test_get_batch_on_the_global_generator_draws_the_same_batches_after_a_peek() -> None:
    torch.manual_seed(0)
    read = DataLoader(GetBatch(token_array(), seed=1337), batch_size=None)
    before = torch.get_rng_state()
    assert len(peek_batches(read, 8)) == 2
    assert torch.equal(torch.get_rng_state(), before)


class _OwnIterator(IterableDataset):
    """A dataset that is its own iterator: reading it is consuming it."""

    def __init__(self) -> None:
        self.left = iter(range(10))

    def __iter__(self):
        return self

    def __next__(self) -> torch.Tensor:
        return torch.tensor([next(self.left)])


def test_a_dataset_that_is_its_own_iterator_is_not_read() -> None:
    loader = DataLoader(_OwnIterator(), batch_size=2)
    assert peek_batches(loader, 4) == []
    assert next(iter(loader)).tolist() == [[0], [1]]


def test_untouched_puts_a_samplers_generator_back() -> None:
    generator = torch.Generator().manual_seed(3)
    loader = DataLoader(list(range(10)), sampler=RandomSampler(range(10), generator=generator))
    with untouched(loader):
        list(loader.sampler)
    fresh = RandomSampler(range(10), generator=torch.Generator().manual_seed(3))
    assert list(loader.sampler) == list(fresh)


class _Cursor(Sampler):
    """A resumable sampler: iterating it moves its position (the next pass starts later)."""

    def __init__(self) -> None:
        self.start = 0

    def __iter__(self):
        start, self.start = self.start, 5
        return iter(range(start, 10))


def test_a_sampler_that_moves_when_iterated_is_walked_on_a_copy() -> None:
    sampler = _Cursor()
    assert list(readable(sampler)) == list(range(10))
    assert sampler.start == 0 and list(sampler) == list(range(10))


class _Reader:
    """A reader object below the dataset: its own generator and a count of its reads."""

    def __init__(self) -> None:
        self.rng, self.reads = np.random.default_rng(0), 0

    def read(self, i: int) -> torch.Tensor:
        self.reads += 1
        return torch.tensor([i, int(self.rng.integers(100))])


class _Nested(Dataset):
    """A map-style dataset whose state lives one level down (a reader, a list of seen indices, a file)."""

    def __init__(self, handle: io.BytesIO) -> None:
        self.reader, self.seen, self.handle = _Reader(), [], handle
        self.random = random.Random(0)

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> torch.Tensor:
        self.seen.append(i)
        self.handle.read(1)
        self.random.random()
        return self.reader.read(i)


def test_untouched_puts_back_what_reading_moved_below_a_dataset() -> None:
    handle = io.BytesIO(b"0123456789")
    dataset = _Nested(handle)
    twin = _Nested(io.BytesIO(b"0123456789"))
    fresh = [twin[i] for i in range(3)]
    with untouched(dataset) as blocked:
        assert blocked is None
        read = [dataset[i] for i in range(3)]
        assert [x.tolist() for x in read] == [x.tolist() for x in fresh]
    assert dataset.reader.reads == 0 and dataset.seen == [] and handle.tell() == 0
    assert dataset.random.getstate() == random.Random(0).getstate()
    assert [dataset[i].tolist() for i in range(3)] == [x.tolist() for x in fresh]


class _Lines(IterableDataset):
    """A stream over a generator kept in a reader dict (one level down)."""

    def __init__(self) -> None:
        self.sources = {"train": (torch.tensor([i]) for i in range(10))}

    def __iter__(self):
        return iter(self.sources["train"])


def test_a_stream_over_an_iterator_kept_below_it_is_not_read() -> None:
    loader = DataLoader(_Lines(), batch_size=2)
    with untouched(loader) as blocked:
        assert blocked is not None and "sources['train']" in blocked
    assert readable(loader.dataset) is None and peek_batches(loader, 4) == []
    assert next(iter(loader)).tolist() == [[0], [1]]


class _BrokenState(IterableDataset):
    """``state_dict()`` fails (a stream not started yet): its position cannot be saved."""

    def state_dict(self) -> dict:
        raise RuntimeError("not started")

    def load_state_dict(self, state: dict) -> None:
        raise AssertionError("never loaded: nothing was read")

    def __iter__(self):
        yield torch.tensor([0])


def test_a_stream_whose_state_cannot_be_saved_is_not_read() -> None:
    assert peek_batches(DataLoader(_BrokenState(), batch_size=1), 4) == []


class _OwnedBy(Dataset):
    """A dataset that keeps a reference to its datamodule and a transform module (as users write)."""

    def __init__(self) -> None:
        self.owner = pl.LightningDataModule()
        self.owner.pending = iter(range(3))  # a live iterator of the run's, not of the data
        self.transform = torch.nn.Dropout(0.5)

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.transform(torch.ones(2) * i)


def test_a_datamodule_or_module_a_dataset_refers_to_is_not_walked() -> None:
    dataset = _OwnedBy()
    with untouched(dataset) as blocked:
        assert blocked is None
    # The dropout draws from the global generator: reading it inside untouched leaves the draws as they were.
    torch.manual_seed(0)
    expected = _OwnedBy()[1]
    torch.manual_seed(0)
    with untouched(dataset):
        dataset[1]
    assert torch.equal(dataset[1], expected)


class _Wrapper(Dataset):
    """A dataset wrapping another (``self.dataset``, as ``Subset`` does) with its own generator."""

    def __init__(self) -> None:
        self.dataset, self.rng = list(range(10)), np.random.default_rng(0)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> int:
        return self.dataset[i] + int(self.rng.integers(100))


def test_a_wrapper_dataset_is_put_back_itself_not_only_what_it_wraps() -> None:
    wrapper = _Wrapper()
    with untouched(wrapper):
        wrapper[0]
    assert wrapper[0] == _Wrapper()[0]


class LaggingStateStream(torch.utils.data.IterableDataset):
    """As ``datasets``' streaming ``IterableDataset``: ``load_state_dict`` sets where the next iteration
    starts, but ``state_dict()`` answers the last iteration's state until a new iteration begins."""

    def __init__(self, n: int = 10) -> None:
        self.n, self.position, self.start = n, 0, 0

    def __iter__(self):
        self.position = self.start
        while self.position < self.n:
            self.position += 1
            yield torch.tensor([self.position - 1])

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.start = state["position"]


def test_a_stream_whose_state_dict_lags_is_put_back_at_its_start_after_two_reads() -> None:
    stream = LaggingStateStream()
    for _ in range(2):  # the second read saved the end of the stream before: training then saw nothing
        with untouched(stream) as blocked:
            assert blocked is None
            assert len(list(stream)) == 10
    assert [int(x) for x in stream] == list(range(10))
    # A real iteration since the last put-back is what the next read saves and puts back.
    iterator = iter(stream)
    next(iterator), next(iterator)
    stream.load_state_dict({"position": 2})
    with untouched(stream):
        list(stream)
    assert [int(x) for x in stream] == list(range(2, 10))


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
