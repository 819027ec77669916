"""The files of a prepared text-classification cache folder, and reading them back.

The folder is published by :func:`lightning_order.data.engine.cache.build_once` (temporary
folder, manifest last, atomic rename, every file hashed in the manifest and verified before use).
It holds ``train/`` and ``val/`` (each an encoded :class:`datasets.Dataset` in ``save_to_disk``'s
layout), ``tokenizer.json`` and ``statistics.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from lightning_order.data.engine.preparation import write_manifest
from lightning_order.data.engine.storage import storage_errors
from lightning_order.data.text.registry import TextState
from lightning_order.errors import DataError
from lightning_order.ledger import StepLedger

__all__ = ["read_state", "write_prepared"]


def write_prepared(folder: Path, state: TextState, ledger: StepLedger, dims: Mapping[str, int]) -> None:
    """Writes what ``prepare_data`` produced; the manifest last (a folder with one is finished).

    Args:
        folder: the temporary cache folder.
        state: the final state of the data steps (encoded parts, tokenizer, statistics).
        ledger: the steps' records; the manifest's ``info`` receives the dims (``vocab_size``
            and ``num_classes`` added from the state), the label names, the data fingerprints
            (``manifest``, ``split``, ``statistics``, ``vocab``).
        dims: the dims the state does not know (``num_features``, ``max_length``).
    """
    from lightning_order.data.engine.tables import save_part  # datasets: imported when data is written

    with storage_errors("save", folder):
        for name, part in state.parts.items():
            save_part(part, folder / name)
        state.tokenizer.save(str(folder / "tokenizer.json"))
        (folder / "statistics.json").write_text(json.dumps(state.statistics, indent=2, sort_keys=True))
    fps = {}
    for key, step in (("split", "split"), ("statistics", "fit_features"), ("vocab", "build_vocab")):
        fps[key] = record.output if (record := ledger.latest(step)) else ""
    sizes = {"vocab_size": state.tokenizer.get_vocab_size(), "num_classes": len(state.label_names)}
    # The manifest's checksum covers the list of files; is_complete verifies every one of them.
    write_manifest(folder, ledger, {**sizes, **dims}, fps, label_names=list(state.label_names))


def read_state(path: Path, ledger: StepLedger) -> TextState:
    """The state ``setup`` starts from: the encoded splits (memory-mapped) and the statistics.

    Statistics that were fitted (their mean is known) were applied by ``encode``; otherwise the
    features were stored raw and the state holds no statistics yet.
    """
    import datasets  # imported when data is read: `audit` and a cache hit need only the manifest
    import pyarrow as pa

    try:
        stats = json.loads((path / "statistics.json").read_text())
        parts = {name: datasets.load_from_disk(str(path / name)) for name in ("train", "val")}
    except (OSError, ValueError, KeyError, pa.ArrowException) as err:
        raise DataError(
            f"the prepared data at {path} cannot be read ({type(err).__name__}: {err}); it changed after "
            "it was verified: delete that folder and run again",
            step="setup",
        ) from err
    fitted = stats["mean"] is not None
    return TextState(
        parts=parts,
        form="encoded",
        statistics=stats if fitted else None,
        standardised=fitted,
        label_names=tuple(ledger.info.get("label_names", ())),
    )
