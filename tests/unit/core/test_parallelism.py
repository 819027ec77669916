"""parallelism: the data-parallel size and rank a run splits its data by (issue #36), from plain values and a Trainer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lightning_order.errors import DataError
from lightning_order.parallelism import DataParallel, data_parallel, derive_data_parallel, mesh_misfit


@pytest.mark.parametrize(
    ("world", "rank", "sampler", "mesh", "expected"),
    [
        (1, 0, None, None, (1, 0, "world")),  # one process
        (4, 3, None, None, (4, 3, "world")),  # no statement: every process its own share (DDP)
        (4, 3, {"num_replicas": 4, "rank": 3}, None, (4, 3, "sampler")),  # DDP's own kwargs
        (2, 1, {"num_replicas": 1, "rank": 0}, (1, 0), (1, 0, "sampler")),  # dp 1 x tp 2
        (4, 3, {"num_replicas": 2, "rank": 1}, (2, 1), (2, 1, "sampler")),  # dp 2 x tp 2, last rank
        (4, 2, None, (2, 1), (2, 1, "mesh")),  # a mesh, no sampler kwargs
        (4, 2, {"num_replicas": 2, "rank": 0}, (2, 1), (2, 0, "sampler")),  # Lightning's statement wins
    ],
)
def test_the_data_parallel_size_and_rank_come_from_the_sampler_then_the_mesh_then_the_world(
    world, rank, sampler, mesh, expected
):
    dp = derive_data_parallel(world, rank, sampler, mesh)
    assert (dp.size, dp.rank, dp.source) == expected
    assert (dp.world_size, dp.global_rank) == (world, rank)
    assert dp.group_size == world // expected[0]


@pytest.mark.parametrize(("sampler", "mesh"), [({"num_replicas": 3, "rank": 0}, None), (None, (2, 2))])
def test_a_stated_size_that_does_not_fit_the_world_is_a_data_error_naming_the_step_and_fix(sampler, mesh):
    with pytest.raises(
        DataError,
        match=r"\[step 'shard'\] the strategy's data-parallel size .* do not fit 4 processes.*data_parallel_size",
    ):
        derive_data_parallel(4, 0, sampler, mesh)


class _Dim:
    def __init__(self, size: int, rank: int) -> None:
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def get_local_rank(self) -> int:
        return self._rank


class _Mesh:
    """What a DeviceMesh exposes to the rule: named dims, each with a size and this process's rank."""

    mesh_dim_names = ("data_parallel", "tensor_parallel")

    def __init__(self, dp: tuple[int, int], tp: tuple[int, int]) -> None:
        self._dims = {"data_parallel": _Dim(*dp), "tensor_parallel": _Dim(*tp)}

    def __getitem__(self, name: str) -> _Dim:
        return self._dims[name]


class _MeshStrategy:
    """A strategy whose sampler kwargs are not ready (ModelParallelStrategy before its mesh): the mesh answers."""

    def __init__(self, mesh: _Mesh) -> None:
        self.device_mesh = mesh

    @property
    def distributed_sampler_kwargs(self):
        raise AssertionError("no mesh yet")


def test_a_trainer_is_read_through_its_strategy():
    assert data_parallel(None) == DataParallel()
    ddp = SimpleNamespace(world_size=2, global_rank=1, strategy=SimpleNamespace())
    assert (data_parallel(ddp).size, data_parallel(ddp).rank) == (2, 1)
    kwargs = SimpleNamespace(distributed_sampler_kwargs={"num_replicas": 1, "rank": 0})
    tp = SimpleNamespace(world_size=2, global_rank=1, strategy=kwargs)
    assert (data_parallel(tp).size, data_parallel(tp).rank, data_parallel(tp).group_size) == (1, 0, 2)
    meshed = SimpleNamespace(world_size=4, global_rank=3, strategy=_MeshStrategy(_Mesh((2, 1), (2, 1))))
    assert data_parallel(meshed).to_dict() == {
        "size": 2,
        "rank": 1,
        "world_size": 4,
        "global_rank": 3,
        "source": "mesh",
    }


@pytest.mark.parametrize(
    ("dp", "tp", "devices", "nodes", "fits"),
    [
        (2, 1, 2, 1, True),
        (1, 2, "2", 1, True),
        ("auto", "auto", 4, 1, True),  # Lightning's own choice: dp = nodes, tp = devices
        (2, 2, [0, 1], 2, True),
        (3, 1, 2, 1, False),
        (2, 2, 2, 1, False),
        ("auto", 3, 2, 1, False),
        (2, 1, "auto", 1, True),  # a count this cannot know is never judged
        (2, 1, -1, 1, True),
    ],
)
def test_a_mesh_that_does_not_cover_the_processes_is_named(dp, tp, devices, nodes, fits) -> None:
    misfit = mesh_misfit(dp, tp, devices, nodes)
    assert (misfit is None) == fits
    if not fits:
        assert f"data_parallel_size={dp} × tensor_parallel_size={tp}" in misfit and "\n" not in misfit
        assert f"devices={devices} × num_nodes={nodes}" in misfit
