"""``lightning_order.data.engine.loaders``: the batch contract's collation, the evaluation loader, and
the resumable train loader in the global order (its position counted as the loop receives batches)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DistributedSampler
from torch.utils.data.dataloader import default_collate

from lightning_order.data.engine.loaders import make_loader, make_train_loader
from lightning_order.data.text.batches import BATCH_KEYS, Collate
from lightning_order.errors import CheckpointError
from lightning_order.positions import GlobalOrder


def _rows(n):
    return [
        {
            "input_ids": torch.tensor([i, 0], dtype=torch.int32),
            "attention_mask": torch.tensor([1, 0], dtype=torch.int8),
            "features": torch.tensor([float(i)]),
            "labels": torch.tensor(i % 2),
        }
        for i in range(n)
    ]


def test_collate_widens_types_and_standardises_when_given_statistics():
    batch = Collate()(_rows(3))
    assert tuple(batch) == BATCH_KEYS
    assert batch["input_ids"].dtype == batch["attention_mask"].dtype == batch["labels"].dtype == torch.long
    assert Collate([1.0], [2.0])(_rows(3))["features"][:, 0].tolist() == [-0.5, 0.0, 0.5]


def test_loader_needs_setup_and_is_seeded():
    with pytest.raises(RuntimeError, match="setup"):
        make_loader(None, 2, True, 0, 0, Collate())
    first = [b["labels"].tolist() for b in make_loader(_rows(8), 2, True, 7, 0, Collate())]
    again = [b["labels"].tolist() for b in make_loader(_rows(8), 2, True, 7, 0, Collate())]
    assert first == again and len(first) == 4


# -- the resumable train loader in the global order --------------------------------------------------
def _train_loader(batch: int = 4, world: int = 1, rank: int = 0, workers: int = 0, size: int = 50):
    order = GlobalOrder(size, batch, world, rank, seed=5)
    return make_train_loader(list(range(size)), order, workers, default_collate)


def _take(iterator, count: int) -> list[list[int]]:
    return [next(iterator).tolist() for _ in range(count)]


@pytest.mark.parametrize("workers", [0, 2])
def test_the_state_counts_the_batches_the_loop_received_and_a_new_loader_continues_there(workers):
    loader = _train_loader(workers=workers)
    assert isinstance(loader.sampler, DistributedSampler)  # Lightning leaves the sampler alone
    assert len(loader) == 12 and loader.state_dict()["samples"] == 0
    iterator = iter(loader)
    head = _take(iterator, 5)  # workers have prefetched further; the state counts what was handed out
    state = loader.state_dict()
    assert (state["epoch"], state["samples"], state["epoch_samples"], state["dataset_size"]) == (
        0,
        20,
        48,
        50,
    )
    tail = [b.tolist() for b in iterator]
    assert loader.state_dict()["samples"] == 48
    again = _train_loader(workers=workers)
    again.load_state_dict(state)
    assert [b.tolist() for b in again] == tail
    assert head + tail == [b.tolist() for b in _train_loader()]  # the uninterrupted epoch
    # On two ranks with the same global batch: the same samples, rank by rank.
    halves = []
    for rank in range(2):
        half = _train_loader(batch=2, world=2, rank=rank)
        half.load_state_dict(state)
        halves.append([b.tolist() for b in half])
    assert [a + b for a, b in zip(*halves)] == tail


def test_an_epoch_done_continues_with_the_next_and_set_epoch_keeps_a_restored_position():
    loader = _train_loader()
    done = dict(loader.state_dict(), samples=48)
    loader.load_state_dict(done)
    assert (loader.state_dict()["epoch"], loader.state_dict()["samples"]) == (1, 0)
    fresh = _train_loader()
    fresh.sampler.set_epoch(1)
    assert [b.tolist() for b in loader] == [b.tolist() for b in fresh]
    loader.load_state_dict(dict(done, samples=8))
    loader.sampler.set_epoch(0)  # Lightning sets the epoch after the restore: the same epoch keeps it
    assert len([b.tolist() for b in loader]) == 10
    loader.load_state_dict({"_snapshot": {}})  # another loader's state: ignored
    assert len(list(loader)) == 12


def _epochs(count: int) -> list[list[list[int]]]:
    straight, epochs = _train_loader(), []
    for epoch in range(count):
        straight.sampler.set_epoch(epoch)
        epochs.append([b.tolist() for b in straight])
    return epochs


def _restored(samples: int, lightning: tuple[int, int]):
    """A loader restored at ``samples`` of epoch 0; ``lightning``: Lightning's (batches done, per epoch)."""
    loader = _train_loader()
    loader.load_state_dict(dict(loader.state_dict(), samples=samples))
    loader.progress = lambda: lightning
    return loader


def test_a_restored_position_is_read_whatever_epoch_lightning_sets_and_later_epochs_follow_it():
    # Saved after fit() returned at max_steps: Lightning counts epoch 0 as ended and sets epoch 1,
    # but carries its count (2 of 12 batches): the data continues epoch 0 at sample 8.
    epochs = _epochs(3)
    loader = _restored(8, (2, 12))
    assert loader.restored and loader.state_dict()["samples"] == 8
    loader.sampler.set_epoch(1)
    assert [b.tolist() for b in loader] == epochs[0][2:] and not loader.restored
    assert loader.state_dict()["epoch"] == 0
    loader.sampler.set_epoch(2)  # Lightning's next epoch reads the data's next one
    assert [b.tolist() for b in loader] == epochs[1]
    loader.sampler.set_epoch(3)
    assert [b.tolist() for b in loader] == epochs[2]
    fresh = _train_loader()  # nothing restored: Lightning's epoch is the data's
    fresh.sampler.set_epoch(2)
    assert not fresh.restored and [b.tolist() for b in fresh] == epochs[2]


def test_a_restored_epoch_lightning_has_no_batch_left_of_is_an_empty_pass_then_the_next_epoch():
    # Saved after fit() returned at the epoch's last step (or at limit_train_batches): Lightning
    # carries 12 of 12 batches into its next epoch; that pass reads nothing, the next the data's epoch 1.
    epochs = _epochs(2)
    loader = _restored(48, (12, 12))
    assert (loader.state_dict()["epoch"], loader.state_dict()["samples"]) == (1, 0)  # the next sample
    loader.sampler.set_epoch(1)
    assert list(loader) == [] and loader.state_dict()["samples"] == 48
    loader.sampler.set_epoch(2)
    assert [b.tolist() for b in loader] == epochs[1]
    limited = _restored(20, (5, 5))  # limit_train_batches=5 reached at the save
    limited.sampler.set_epoch(1)
    assert list(limited) == []
    limited.sampler.set_epoch(2)
    assert [b.tolist() for b in limited] == epochs[1]


def test_a_restored_position_lightning_starts_a_new_epoch_after_is_the_datas_next_epoch():
    # Saved at the last step of an epoch cut by limit_train_batches=5 during the fit: Lightning
    # starts epoch 1 afresh (count 0), so does the data; the rest of epoch 0 is not read.
    epochs = _epochs(2)
    loader = _restored(20, (0, 5))
    loader.sampler.set_epoch(1)
    assert [b.tolist() for b in loader] == epochs[1]
    # Mid-epoch (Lightning's count carried, 2 of 5 left): the rest of the limited epoch, no more.
    loader = _restored(12, (3, 5))
    loader.sampler.set_epoch(0)
    assert [b.tolist() for b in loader] == epochs[0][3:5]


@pytest.mark.parametrize(
    ("field", "value"), [("epoch", -1), ("samples", "8"), ("samples", None), ("samples", -8)]
)
def test_a_garbage_position_is_one_checkpoint_error_never_read(field, value):
    loader = _train_loader()
    with pytest.raises(
        CheckpointError, match=f"data position has {field}={value!r}, expected a whole number"
    ):
        loader.load_state_dict(dict(loader.state_dict(), **{field: value}))
    assert not loader.restored and len(list(loader)) == 12  # nothing of it was taken


def test_the_train_loader_needs_setup():
    with pytest.raises(RuntimeError, match="setup"):
        make_train_loader(None, GlobalOrder(4, 2), 0, default_collate)


class _Blocks(torch.utils.data.Dataset):
    """A split of ``n`` samples that are their own index (nothing stored)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def test_the_train_loader_of_a_huge_split_reads_without_a_list_of_its_indices():
    """10^11 samples: the old sampler listed the rank's indices of the epoch (hundreds of GB) before the first batch."""
    order = GlobalOrder(10**11, 4, 2, 1, seed=3)
    loader = make_train_loader(_Blocks(order.size), order, 0, lambda items: list(items))
    batches = iter(loader)
    first, second = next(batches), next(batches)
    assert first == order.order_at(0, torch.arange(4, 8).numpy()).tolist()
    assert second == order.order_at(0, torch.arange(12, 16).numpy()).tolist()
    assert loader.state_dict()["samples"] == 16 and loader.state_dict()["order"] == order.digest(0)
