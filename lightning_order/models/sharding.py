"""How :class:`~lightning_order.OrderedCausalLM` is sharded under Lightning's ``ModelParallelStrategy``.

The strategy gives the module a 2-D device mesh (``data_parallel`` × ``tensor_parallel``) and calls
``configure_model``; this module applies the plan:

- **tensor parallelism** (``tensor_parallel`` size above 1): in every decoder block, the MLP's first
  linear is split by output columns and its second by input rows (``ColwiseParallel`` /
  ``RowwiseParallel``: one all-reduce per block). Attention, the embeddings, the norms and the tied
  head stay replicated across the tensor-parallel group: the fused query-key-value projection cannot
  be split by columns without mixing heads, and at this model's sizes the MLP holds two thirds of
  a block's weights;
- **FSDP2** (``data_parallel`` size above 1): ``fully_shard`` on each decoder block, then on the whole
  model (the embedding and the tied head in the root group), over the ``data_parallel`` dimension.
  This is also what reduces the gradients across data-parallel ranks: ``ModelParallelStrategy`` does
  not wrap the model in DDP.

With one rank in both dimensions nothing is applied. Applying it twice is a no-op (Lightning calls
``configure_model`` on every ``fit``, ``validate`` and ``test``).
"""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["TENSOR_PARALLEL_PLAN", "is_sharded", "shard_decoder"]

#: The plan of one decoder block's submodules for ``parallelize_module`` (names inside a block).
TENSOR_PARALLEL_PLAN = {"mlp.0": "ColwiseParallel", "mlp.2": "RowwiseParallel"}


def _dimension(mesh: Any, name: str) -> Any:
    """``mesh[name]`` when the mesh has that dimension, else ``None``."""
    names = getattr(mesh, "mesh_dim_names", None) or ()
    return mesh[name] if name in names else None


def is_sharded(model: nn.Module) -> bool:
    """Whether :func:`shard_decoder` has been applied to ``model`` already."""
    return bool(getattr(model, "_lightning_order_sharded", False))


def shard_decoder(model: nn.Module, blocks: nn.ModuleList, mesh: Any) -> None:
    """Apply the tensor-parallel plan and FSDP2 to ``model`` (see the module docstring).

    Args:
        model: the whole decoder (its root FSDP group holds the embeddings and the head).
        blocks: its decoder blocks, each with an ``mlp`` of ``Linear``, activation, ``Linear``.
        mesh: the strategy's device mesh, with ``data_parallel`` and ``tensor_parallel`` dimensions.
    """
    if is_sharded(model):
        return
    tensor_parallel = _dimension(mesh, "tensor_parallel")
    data_parallel = _dimension(mesh, "data_parallel")
    if tensor_parallel is not None and tensor_parallel.size() > 1:
        from torch.distributed.tensor import parallel

        plan = {name: getattr(parallel, style)() for name, style in TENSOR_PARALLEL_PLAN.items()}
        for block in blocks:
            parallel.parallelize_module(block, tensor_parallel, plan)
    if data_parallel is not None and data_parallel.size() > 1:
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:  # torch < 2.6
            from torch.distributed._composable.fsdp import fully_shard
        for block in blocks:
            fully_shard(block, mesh=data_parallel)
        fully_shard(model, mesh=data_parallel)
    model._lightning_order_sharded = True
