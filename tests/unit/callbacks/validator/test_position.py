"""callbacks.validator.resume (the data position): where a run stands, read off a Trainer (a fake one here: no fit needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch.utils.data import DataLoader

from lightning_order.callbacks.validator.resume import saved_position


def _trainer(world: int, sampler_kwargs: dict | None, batches: int) -> SimpleNamespace:
    strategy = (
        SimpleNamespace(distributed_sampler_kwargs=sampler_kwargs) if sampler_kwargs else SimpleNamespace()
    )
    progress = SimpleNamespace(current=SimpleNamespace(ready=batches))
    return SimpleNamespace(
        world_size=world,
        global_rank=world - 1,
        strategy=strategy,
        train_dataloader=DataLoader(list(range(64)), batch_size=4),
        num_training_batches=16,
        fit_loop=SimpleNamespace(
            epoch_loop=SimpleNamespace(batch_progress=progress),
            epoch_progress=SimpleNamespace(current=SimpleNamespace(started=1)),
        ),
    )


@pytest.mark.parametrize(
    ("world", "kwargs", "replicas"),
    [
        (2, None, 2),
        (2, {"num_replicas": 2, "rank": 1}, 2),
        (2, {"num_replicas": 1, "rank": 0}, 1),
        (4, {"num_replicas": 2, "rank": 1}, 2),
    ],
)
def test_the_global_batch_of_a_position_counts_data_parallel_ranks_only(world, kwargs, replicas):
    position = saved_position(_trainer(world, kwargs, batches=3))
    assert position["world_size"] == replicas and position["global_batch"] == replicas * 4
    assert position["samples"] == 3 * replicas * 4  # tensor-parallel ranks read the same samples
