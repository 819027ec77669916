"""What the real train loader serves with its workers, read on a copy before step 1 (``rows-served-twice``).

Gathering only (the judgement is :mod:`lightning_order.checks.served_twice`). Read in
``on_train_start`` off the loader Lightning will iterate (``trainer.train_dataloader``), only when
it reads an ``IterableDataset`` with two loader workers or more: a map-style dataset's rows are
dealt to the workers by the sampler (no worker can serve another's row), and with one worker or
none there is no second reader.

The copy: a new ``DataLoader`` over the same dataset, with the same batch size, collate function,
``num_workers``, ``worker_init_fn`` and multiprocessing context, its collate function wrapped to
tag each batch with the worker that made it, never persistent. Its workers start from the dataset
as the run holds it (forked or pickled) and are shut down when the read ends: the run's own
loader, its iterator and its persistent workers are not touched, the random states the copy
draws from are put back (:func:`~.peek.untouched`; the loader's own generator is cloned), and the
dataset in this process is never iterated by the copy. Then as many rows are read without
workers (:func:`~.peek.peek_batches`, in this process, put back): the dataset's own repeat rate.

Bounded: :data:`SERVED_ROWS` rows (and at least two batches per worker, so every worker is read),
or :data:`~.budget.READ_BYTES` / :data:`~.budget.READ_TOKENS` of batches, whichever comes first;
each batch is hashed and dropped as it arrives. The cost is starting the workers once (a fork per
worker) and their first batches.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
import xxhash

from lightning_order.callbacks.validator.budget import READ_BYTES, READ_TOKENS, item_size
from lightning_order.callbacks.validator.evidence import leaf_array, leaves, train_loader
from lightning_order.callbacks.validator.gather import agree, all_gather
from lightning_order.callbacks.validator.peek import peek_batches, untouched
from lightning_order.checks.registry import EvidenceKind, Phase, register_check
from lightning_order.checks.served_twice import check_served_twice, served_rows
from lightning_order.rules import Violation

__all__ = [
    "SERVED_ROWS",
    "WORKER_TIMEOUT",
    "batch_row_hashes",
    "read_served",
    "rows_served_twice",
    "served_twice",
]

log = logging.getLogger(__name__)

#: Rows of the first batches read with the workers (and again without them).
SERVED_ROWS = 256
#: Seconds the copy waits for a worker's batch when the loader sets no timeout of its own.
WORKER_TIMEOUT = 120.0


def batch_row_hashes(batch: Any) -> list[int]:
    """One hash per row of a collated batch: every array leaf's row (rows counted by the first leaf)."""
    arrays = [a for a in (leaf_array(leaf) for _, leaf in leaves(batch)) if a is not None and a.ndim]
    if not arrays:
        return []
    count = arrays[0].shape[0]
    arrays = [a for a in arrays if a.shape[0] == count]
    parts = [np.ascontiguousarray(a.reshape(count, -1)).view(np.uint8).reshape(count, -1) for a in arrays]
    rows = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
    return [xxhash.xxh3_64_intdigest(r.tobytes()) for r in rows]


class _Tagged:
    """The loader's collate function, returning ``(worker id, batch)``: which worker made each batch.

    A module-level class, so a loader whose workers are spawned can pickle it (with the collate
    function it wraps).
    """

    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, items: Any) -> tuple[int, Any]:
        info = torch.utils.data.get_worker_info()
        return (-1 if info is None else int(info.id)), self.collate(items)


def _copy(loader: torch.utils.data.DataLoader) -> torch.utils.data.DataLoader:
    """A loader like ``loader`` (dataset, batching, workers), tagging batches, never persistent."""
    generator = None
    if loader.generator is not None:  # drawing the workers' base seed must not move the run's generator
        generator = torch.Generator().set_state(loader.generator.get_state())
    options: dict[str, Any] = {}
    if loader.num_workers and loader.prefetch_factor is not None:
        options["prefetch_factor"] = loader.prefetch_factor
    return torch.utils.data.DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        drop_last=loader.drop_last,
        collate_fn=_Tagged(loader.collate_fn),
        num_workers=loader.num_workers,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        generator=generator,
        timeout=loader.timeout or WORKER_TIMEOUT,
        persistent_workers=False,
        **options,
    )


def read_served(loader: torch.utils.data.DataLoader, rows: int = SERVED_ROWS) -> list[tuple[int, int]]:
    """``(worker id, row hash)`` of the first rows a copy of ``loader`` serves with its workers.

    Args:
        loader: the run's train loader (not iterated: a copy is).
        rows: rows to read at most (whole batches), at least two batches per worker.
    """
    copy = _copy(loader)
    served: list[tuple[int, int]] = []
    batches, held, tokens = 0, 0, 0
    with untouched(loader):  # the global generators the copy's seeds are drawn from are put back
        batch_iter = iter(copy)
        try:
            for worker, batch in batch_iter:
                served += [(worker, h) for h in batch_row_hashes(batch)]
                size = item_size(batch)
                batches, held, tokens = batches + 1, held + size[0], tokens + size[1]
                del batch
                every_worker = batches >= 2 * loader.num_workers
                if every_worker and (len(served) >= rows or held >= READ_BYTES or tokens >= READ_TOKENS):
                    break
        finally:
            del batch_iter  # its workers are shut down here
    return served


def served_twice(trainer: Any) -> tuple[list[Violation], list[Violation]]:
    """``(proven, suspected)`` ``rows-served-twice`` violations of this rank's train loader.

    Not collective: each rank reads its own loader; the caller agrees the verdicts across ranks.
    """
    loader = train_loader(trainer)
    dataset = getattr(loader, "dataset", None)
    if loader is None or not isinstance(dataset, torch.utils.data.IterableDataset) or loader.num_workers < 2:
        return [], []
    try:
        served = read_served(loader)
        own = [h for b in peek_batches(loader, max(1, len(served))) for h in batch_row_hashes(b)][
            : len(served)
        ]
    except Exception as err:  # workers that cannot start or read here: no evidence, the run goes on
        log.debug("OrderValidator: could not read the train loader with its workers (%s)", err)
        return [], []
    if not served or not own:
        return [], []
    return check_served_twice(served_rows(served, own, loader.num_workers))


def rows_served_twice(trainer: Any) -> tuple[list[Violation], list[Violation]]:
    """``(proven, suspected)`` from every rank's :func:`served_twice`, identical on every rank.

    Collective under DDP (every rank must call it).
    """
    proven, suspected = served_twice(trainer)
    gathered = all_gather(trainer, ([v.to_dict() for v in proven], [v.to_dict() for v in suspected]))
    return agree([g[0] for g in gathered]), agree([g[1] for g in gathered])


def _gather_served(trainer: Any, evidence: Any) -> dict[str, list[dict[str, Any]]]:
    proven, suspected = served_twice(trainer)
    return {"proven": [v.to_dict() for v in proven], "suspected": [v.to_dict() for v in suspected]}


# At train start, once the train loader (and its workers' settings) is final; every rank's reading
# is judged alike (a duplicating loader on one rank stops every rank), suspicions warn.
register_check(
    "rows-served-twice",
    lambda evidence: agree([rank["proven"] for rank in evidence.ranks]),
    phase=Phase.TRAIN_START,
    reads=[EvidenceKind.RANKS],
    rules=["rows-served-twice"],
    gather=_gather_served,
    order=30,
    facts=lambda _own, ranks: {"rows_served_suspected": agree([rank["suspected"] for rank in ranks])},
)
