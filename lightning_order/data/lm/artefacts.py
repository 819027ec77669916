"""The files of a prepared LM cache folder, and reading them back.

The folder is published by :func:`lightning_order.data.engine.cache.build_once` like the
classification cache (temporary folder, manifest last, atomic rename, every file hashed in the
manifest and verified before use). Per split (``train/``, ``val/``): ``blocks.npy`` (int32,
``n × (block_size + 1)``, memory-mapped when read), ``doc_hashes.npy`` (int64 hash of each
document's word sequence, for the leakage check) and ``documents.parquet`` (the cleaned,
deduplicated documents, for held-out evaluation and the straddle tests); ``tokenizer.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lightning_order.data.engine.cache import TEMP_MARKER
from lightning_order.data.engine.keys import key_hashes
from lightning_order.data.engine.runner import DataState
from lightning_order.data.engine.storage import file_records, storage_errors
from lightning_order.data.lm.config import EOS_TOKEN, padded_size
from lightning_order.errors import DataError
from lightning_order.ledger import MANIFEST_NAME, StepLedger

__all__ = ["SPLITS", "read_blocks", "read_documents", "write_lm_prepared"]

SPLITS: tuple[str, ...] = ("train", "val")


def write_lm_prepared(folder: Path, state: DataState, ledger: StepLedger, pad_vocab_multiple: int) -> None:
    """Writes the packed splits, the documents and the tokenizer, then the manifest (last).

    The manifest's ``info`` receives the dims (``vocab_size``, ``padded_vocab_size``,
    ``block_size``), the end-of-text token and id, and the data fingerprints (``manifest``,
    ``split``, ``vocab``, ``corpus``).
    """
    documents = state.extra.get("documents", {})
    with storage_errors("save", folder):
        for name in SPLITS:
            (folder / name).mkdir()
            np.save(folder / name / "blocks.npy", np.ascontiguousarray(state.parts[name], dtype=np.int32))
            docs = documents.get(name, [])
            np.save(folder / name / "doc_hashes.npy", key_hashes(docs, text=True))
            pq.write_table(
                pa.table({"text": pa.array(docs, pa.large_string())}), folder / name / "documents.parquet"
            )
        state.tokenizer.save(str(folder / "tokenizer.json"))
    block = np.asarray(state.parts["train"]).shape[1] - 1
    size = state.tokenizer.get_vocab_size()
    multiple = pad_vocab_multiple
    fps = {"manifest": ledger.fingerprint}
    for key, step in (("split", "split"), ("vocab", "build_vocab")):
        fps[key] = record.output if (record := ledger.latest(step)) else ""
    load = ledger.latest("load")
    fps["corpus"] = str(load.params.get("corpus", "")) if load is not None else ""
    ledger.info.update(
        dims={"vocab_size": size, "padded_vocab_size": padded_size(size, multiple), "block_size": block},
        pad_vocab_multiple=multiple,
        eos_token=EOS_TOKEN,
        eos_id=state.tokenizer.token_to_id(EOS_TOKEN),
        data_fingerprints=fps,
    )
    ledger.info["files"] = file_records(folder, skip=(MANIFEST_NAME, TEMP_MARKER, "work"))
    with storage_errors("save", folder):
        ledger.save(folder)


def _unreadable(path: Path, err: Exception) -> DataError:
    return DataError(
        f"the prepared data at {path} cannot be read ({type(err).__name__}: {err}); it changed after it was "
        "verified: delete that folder and run again",
        step="setup",
    )


def read_blocks(path: Path) -> dict[str, Any]:
    """The packed splits (memory-mapped ``int32`` arrays) and each split's document hashes."""
    out: dict[str, Any] = {}
    try:
        for name in SPLITS:
            out[name] = np.load(path / name / "blocks.npy", mmap_mode="r")
            out[f"{name}_doc_hashes"] = np.load(path / name / "doc_hashes.npy")
    except (OSError, ValueError) as err:
        raise _unreadable(path, err) from err
    return out


def read_documents(path: Path, split: str) -> list[str]:
    """The cleaned, deduplicated documents of ``split`` (``train`` or ``val``)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    try:
        return pq.read_table(path / split / "documents.parquet").column("text").to_pylist()
    except (OSError, pa.ArrowException) as err:
        raise _unreadable(path, err) from err
