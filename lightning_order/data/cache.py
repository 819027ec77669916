"""The prepared-data cache: one folder per pipeline fingerprint, published atomically.

Preparation writes into a temporary folder beside the final one (same file system), writes the
manifest last, and renames the folder into place: a reader finds a complete cache or none, and a
process killed mid-way leaves only a temporary folder that the next preparation deletes. A file
lock beside the folder (``<key>.lock``, :mod:`filelock`) makes one process prepare while the
others (DDP ranks, other nodes on a shared file system) wait and then reuse its result.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import datasets
from filelock import FileLock

from lightning_order.data.steps import DataState
from lightning_order.errors import ManifestError
from lightning_order.ledger import MANIFEST_NAME, StepLedger

__all__ = [
    "CACHE_ENV",
    "cache_lock",
    "default_cache_dir",
    "is_complete",
    "new_temp_dir",
    "prepare_once",
    "publish",
    "read_state",
    "remove_stale",
    "write_prepared",
]

#: The environment variable that overrides the default cache folder.
CACHE_ENV = "LIGHTNING_ORDER_CACHE"
_REQUIRED = ("train", "val", "tokenizer.json")


def default_cache_dir() -> Path:
    """``$LIGHTNING_ORDER_CACHE`` if set, else ``~/.cache/lightning_order``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "lightning_order"


def cache_lock(root: Path, key: str, timeout: float = -1) -> FileLock:
    """The lock that serialises preparation of ``key`` (a file beside the cache folder)."""
    root.mkdir(parents=True, exist_ok=True)
    return FileLock(str(root / f"{key}.lock"), timeout=timeout)


def _split_complete(folder: Path) -> bool:
    try:
        state = json.loads((folder / "state.json").read_text())
    except (OSError, ValueError):
        return False
    files = [f.get("filename") for f in state.get("_data_files", [])]
    return bool(files) and all((folder / name).is_file() for name in files)


def is_complete(path: Path, key: str | None = None) -> bool:
    """Whether ``path`` holds a finished cache (readable manifest of ``key``, every artefact present)."""
    if not (path / MANIFEST_NAME).is_file():
        return False
    try:
        ledger = StepLedger.load(path)
    except ManifestError:
        return False
    if key is not None and ledger.info.get("cache_key") != key:
        return False
    if not all((path / name).exists() for name in _REQUIRED):
        return False
    return _split_complete(path / "train") and _split_complete(path / "val")


def remove_stale(root: Path, key: str) -> list[Path]:
    """Deletes leftovers of interrupted preparations of ``key`` (call it holding the lock).

    Returns:
        The folders removed: temporary folders, and a final folder that is not complete.
    """
    removed = []
    for tmp in root.glob(f".tmp-{key}-*"):
        shutil.rmtree(tmp, ignore_errors=True)
        removed.append(tmp)
    final = root / key
    if final.exists() and not is_complete(final, key):
        shutil.rmtree(final, ignore_errors=True)
        removed.append(final)
    return removed


def new_temp_dir(root: Path, key: str) -> Path:
    """A fresh temporary folder for preparing ``key``, beside the final folder."""
    path = root / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    return path


def publish(tmp: Path, final: Path) -> Path:
    """Renames the finished temporary folder to its final name (atomic on one file system)."""
    os.rename(tmp, final)
    return final


def prepare_once(root: Path, key: str, build: Callable[[Path], None]) -> None:
    """Builds the cache folder ``root/key`` with ``build(tmp)`` unless a complete one exists.

    Under the lock: leftovers of interrupted preparations are removed, ``build`` fills a fresh
    temporary folder (writing the manifest last), and the folder is published; on any error the
    temporary folder is deleted, so nothing half-written is ever trusted.
    """
    final = root / key
    if is_complete(final, key):
        return
    with cache_lock(root, key):
        if is_complete(final, key):
            return
        remove_stale(root, key)
        tmp = new_temp_dir(root, key)
        try:
            build(tmp)
            publish(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def write_prepared(folder: Path, state: DataState, ledger: StepLedger, dims: Mapping[str, int]) -> None:
    """Writes what ``prepare_data`` produced; the manifest last (a folder with one is finished).

    Args:
        folder: the temporary cache folder.
        state: the final state of the data steps (encoded parts, tokenizer, statistics).
        ledger: the steps' records; the manifest's ``info`` receives the dims (``vocab_size``
            and ``num_classes`` added from the state), the label names, the data fingerprints
            (``manifest``, ``split``, ``statistics``, ``vocab``).
        dims: the dims the state does not know (``num_features``, ``max_length``).
    """
    for name, part in state.parts.items():
        part.save_to_disk(str(folder / name))
    state.tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "statistics.json").write_text(json.dumps(state.statistics, indent=2, sort_keys=True))
    fps = {"manifest": ledger.fingerprint}
    for key, step in (("split", "split"), ("statistics", "fit_features"), ("vocab", "build_vocab")):
        fps[key] = record.output if (record := ledger.latest(step)) else ""
    sizes = {"vocab_size": state.tokenizer.get_vocab_size(), "num_classes": len(state.label_names)}
    ledger.info.update(dims={**sizes, **dims}, label_names=list(state.label_names), data_fingerprints=fps)
    ledger.save(folder)


def read_state(path: Path, ledger: StepLedger) -> DataState:
    """The state ``setup`` starts from: the encoded splits (memory-mapped) and the statistics.

    Statistics that were fitted (their mean is known) were applied by ``encode``; otherwise the
    features were stored raw and the state holds no statistics yet.
    """
    stats = json.loads((path / "statistics.json").read_text())
    fitted = stats["mean"] is not None
    return DataState(
        parts={name: datasets.load_from_disk(str(path / name)) for name in ("train", "val")},
        form="encoded",
        statistics=stats if fitted else None,
        standardised=fitted,
        label_names=tuple(ledger.info.get("label_names", ())),
    )
