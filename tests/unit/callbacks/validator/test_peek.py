"""Reading a stream without consuming it (lightning_order/callbacks/validator/peek.py)."""

from __future__ import annotations

import io
import itertools
import random

import numpy as np
import pytorch_lightning as pl
import torch
from streams import CountingStream, GetBatch, TokenStream, batch_hash, documents, token_array
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler, Sampler

from lightning_order.callbacks.validator.reading import peek_batches, readable, untouched


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
