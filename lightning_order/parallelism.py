"""The data-parallel size and rank of a run: what splits the data (docs/architecture.md, "The train order and the position").

Under plain DDP every rank is a data-parallel rank. With a device mesh (Lightning's
``ModelParallelStrategy``: FSDP2, tensor parallelism) only the ``"data_parallel"`` dimension
splits the data: the ranks of one model-parallel (tensor-parallel) group read the same batches,
or their collectives mix different inputs silently. Lightning states the data-parallel size and
rank publicly as ``trainer.strategy.distributed_sampler_kwargs`` (``{"num_replicas", "rank"}``,
what its own ``DistributedSampler`` is built with; ``ModelParallelStrategy`` derives it from its
mesh), so that is read first, the mesh second, the world size and global rank last.

:func:`derive_data_parallel` is the rule on plain values (tested without a Trainer);
:func:`data_parallel` reads them off a Trainer. No torch import: the strategy's objects are
only asked for what they expose.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from lightning_order.errors import DataError

__all__ = ["DataParallel", "data_parallel", "derive_data_parallel", "mesh_data_parallel", "mesh_misfit"]


@dataclass(frozen=True)
class DataParallel:
    """Where a process stands in the data-parallel dimension.

    Attributes:
        size: data-parallel ranks (the number of shares the epoch is cut into).
        rank: this process's data-parallel rank (which share it reads).
        world_size: all processes.
        global_rank: this process's global rank.
        source: what said so: ``"sampler"`` (``distributed_sampler_kwargs``), ``"mesh"`` or ``"world"``.
    """

    size: int = 1
    rank: int = 0
    world_size: int = 1
    global_rank: int = 0
    source: str = "world"

    @property
    def group_size(self) -> int:
        """Processes that read the same share: one model-parallel (tensor-parallel) group."""
        return self.world_size // self.size

    def to_dict(self) -> dict[str, Any]:
        """Plain data, for the validator's gathered summaries."""
        return asdict(self)


def derive_data_parallel(
    world_size: int,
    global_rank: int,
    sampler_kwargs: Mapping[str, Any] | None = None,
    mesh: tuple[int, int] | None = None,
) -> DataParallel:
    """The data-parallel size and rank from what a strategy states.

    Args:
        world_size: all processes (``trainer.world_size``).
        global_rank: this process (``trainer.global_rank``).
        sampler_kwargs: the strategy's ``distributed_sampler_kwargs`` (``num_replicas``, ``rank``),
            or ``None`` when it has none.
        mesh: ``(size, rank)`` of the device mesh's ``"data_parallel"`` dimension, or ``None``.

    Returns:
        The sampler's statement when it has one, else the mesh's, else every process a data-parallel rank.

    Raises:
        DataError: the stated size does not divide the world size, or the rank is outside it.
    """
    world, rank = max(1, int(world_size)), int(global_rank)
    if sampler_kwargs and sampler_kwargs.get("num_replicas") is not None:
        kwargs = sampler_kwargs
        size, dp_rank, source = int(kwargs["num_replicas"]), int(kwargs.get("rank", 0)), "sampler"
    elif mesh is not None:
        (size, dp_rank), source = (int(mesh[0]), int(mesh[1])), "mesh"
    else:
        return DataParallel(world, rank, world, rank, "world")
    if size < 1 or world % size or not 0 <= dp_rank < size:
        raise DataError(
            f"the strategy's data-parallel size {size} and rank {dp_rank} (from its {source}) do not fit "
            f"{world} processes: the size must divide the world size and the rank lie in [0, {size}); "
            "fix the strategy's data_parallel_size / distributed_sampler_kwargs",
            step="shard",
        )
    return DataParallel(size, dp_rank, world, rank, source)


def mesh_data_parallel(strategy: Any) -> tuple[int, int] | None:
    """``(size, rank)`` of the strategy's ``device_mesh["data_parallel"]``, or ``None`` without one."""
    try:
        mesh = getattr(strategy, "device_mesh", None)
    except RuntimeError:  # ModelParallelStrategy before its processes are initialised
        return None
    names = getattr(mesh, "mesh_dim_names", None) or ()
    if mesh is None or "data_parallel" not in names:
        return None
    dim = mesh["data_parallel"]
    return int(dim.size()), int(dim.get_local_rank())


def _sampler_kwargs(strategy: Any) -> Mapping[str, Any] | None:
    try:
        kwargs = getattr(strategy, "distributed_sampler_kwargs", None)
    except (AssertionError, RuntimeError, AttributeError):  # asked before the mesh exists
        return None
    return kwargs if isinstance(kwargs, Mapping) else None


def data_parallel(trainer: Any) -> DataParallel:
    """The data-parallel size and rank of ``trainer`` (one process when ``trainer`` is ``None``).

    Args:
        trainer: a Lightning Trainer, or ``None``.
    """
    if trainer is None:
        return DataParallel()
    world, rank = int(getattr(trainer, "world_size", 1) or 1), int(getattr(trainer, "global_rank", 0) or 0)
    strategy = getattr(trainer, "strategy", None)
    return derive_data_parallel(world, rank, _sampler_kwargs(strategy), mesh_data_parallel(strategy))


def _count(value: Any) -> int | None:
    """A count a config gives (``2``, ``"2"``, a list of device ids); ``None`` for ``"auto"``, ``-1`` or anything else."""
    if isinstance(value, (list, tuple)):
        return len(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def mesh_misfit(
    data_parallel_size: Any, tensor_parallel_size: Any, devices: Any, num_nodes: Any = 1
) -> str | None:
    """Why a ``ModelParallelStrategy`` mesh cannot fit the processes Lightning starts, or ``None``.

    Lightning starts ``devices × num_nodes`` processes and only then finds that the mesh
    (``data_parallel_size × tensor_parallel_size``) does not cover them, with a traceback on every
    rank. ``"auto"`` sizes are Lightning's (``num_nodes`` and ``devices``); a count this cannot
    know (``devices="auto"`` or ``-1``) is never judged.

    Args:
        data_parallel_size: the strategy's ``data_parallel_size`` (an int or ``"auto"``).
        tensor_parallel_size: the strategy's ``tensor_parallel_size`` (an int or ``"auto"``).
        devices: the Trainer's ``devices`` (an int, a list of ids, a string).
        num_nodes: the Trainer's ``num_nodes``.
    """
    devices_n, nodes = _count(devices), _count(num_nodes if num_nodes is not None else 1)
    if devices_n is None or nodes is None:
        return None
    dp = nodes if data_parallel_size in (None, "auto") else _count(data_parallel_size)
    tp = devices_n if tensor_parallel_size in (None, "auto") else _count(tensor_parallel_size)
    if dp is None or tp is None or dp * tp == devices_n * nodes:
        return None
    return (
        f"the device mesh data_parallel_size={data_parallel_size} × tensor_parallel_size={tensor_parallel_size} "
        f"covers {dp * tp} ranks, but devices={devices} × num_nodes={num_nodes} starts {devices_n * nodes} "
        f"processes: set the two sizes so that their product is {devices_n * nodes} (e.g. data_parallel_size="
        f"{devices_n * nodes} with tensor_parallel_size=1), or change devices"
    )
