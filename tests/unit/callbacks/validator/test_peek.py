"""Reading a stream without consuming it (lightning_order/callbacks/validator/peek.py)."""

from __future__ import annotations

import itertools

import torch
from streams import CountingStream, GetBatch, TokenStream, batch_hash, documents, token_array
from torch.utils.data import DataLoader, IterableDataset, RandomSampler, Sampler

from lightning_order.callbacks.validator.peek import peek_batches, readable, untouched


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
