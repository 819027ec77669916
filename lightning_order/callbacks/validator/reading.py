"""Reading a run's data without changing it: what the validator may hold, how it reads, what it reads.

Every zero-glue check reads rows the run will train on, before step 1; the run must then start exactly
where it would have without the validator, and the reads must stay bounded whatever a row holds.
This module is that one concern, in the order a read goes through it: the budgets a read keeps to,
the guard that puts back what a read moves, the items behind a datamodule's loaders (a split's
dataset, an item's leaves by path), sampled batches and what they show, and an iterable split
read as token ids. Nothing here judges: the checks that read through it live in the modules
around the check registry (:mod:`.content`, :mod:`.overlap`, :mod:`.lm`, :mod:`.resume`).

**How much one read may hold**: how much of a run's data the validator holds at once: rows bounded by tokens and bytes.

``sample_rows`` and ``whole_rows`` count rows, and a row may be 16 tokens or 128k: a row count
alone lets the validator's reads grow with the block size (issue #42, item 8: about 2 GB of peak
memory per 1 000 rows of 32k tokens). Every read is therefore also bounded by the stated budgets
below, measured on the items read (the bytes of their arrays and text, the elements of their
integer arrays as tokens):

- one read (a sample, one chunk of a whole-split pass) holds at most :data:`READ_BYTES` and
  :data:`READ_TOKENS`, and always at least one row;
- a split is hashed whole (``whole_rows``) only while all its items stay within
  :data:`WHOLE_BYTES` and :data:`WHOLE_TOKENS`; a larger one is sampled like a longer one;
- an iterable split (a stream) is read as tokens for the overlap check up to
  :data:`STREAM_TOKENS` per split (below).

What was read is dropped when the check that read it returns: nothing outlives the validator's
hooks but hashes and figures (docs/validator.md, "Memory").

**Reading without moving the run**: a run's data read without changing what the run trains on.

The validator looks at items and batches before step 1; the run must then start exactly where it
would have without the validator (issue #37, item 9; issue #42, item 2). Every read goes through
:func:`untouched`, which puts back what reading can move:

- the global random number generators (``torch``, CUDA, ``numpy``, ``random``: a
  ``RandomSampler`` without a generator, nanoGPT's ``get_batch``, an augmentation in
  ``__getitem__``), restored by :func:`isolated_rng`;
- a dataset or sampler with ``state_dict()`` / ``load_state_dict(state)`` (torchtitan's stateful
  streams, ``datasets``' ``IterableDataset``): its state is saved before reading and loaded back;
- everything else reachable from the dataset and the sampler through attributes and small
  containers (a bounded walk): generators they keep (``numpy`` ``Generator`` / ``RandomState``,
  ``random.Random``, ``torch.Generator``) get their state back, counters and other attributes
  their value, lists, dicts and sets their contents, seekable files their position.

What cannot be put back is not read: a dataset that is its own iterator, or that keeps an open
iterator or generator anywhere in reach (in a list, in a reader object), and a stateful one whose
``state_dict`` takes arguments (litdata's ``StreamingDataset``, issue #48) or whose state cannot
be copied. The checks that need its rows are skipped with a one-line note naming the reason.

The rule, for a hand-written dataset: keep its position and generators in attributes (they are
put back), or give it ``state_dict()`` / ``load_state_dict(state)``; open iterators only in
``__iter__``.

**The items behind a datamodule's loaders**: each split's map-style dataset and an item's leaves
by path (an iterable dataset is not indexable and is skipped: documented limit), and the key
hashes of an encoded split read off Arrow.

**Sampled batches.** Batches sampled from a datamodule's dataloaders, and what the validator reads off them.

Gathering only, over duck-typed objects (any datamodule, any batch layout: a dict with
``input_ids`` / ``features`` / ``labels``, or a tuple whose last element is the label); the
judgements are in :mod:`lightning_order.checks`. A sample is drawn with a fixed seed, so every
rank reads the same rows of the same data.

**An iterable split as token ids.** A split's token ids read as one stream, up to a stated budget: the overlap check on iterable splits.

Gathering only (the judgement is :mod:`lightning_order.checks.windows`). An iterable split (a
torchtitan-style stateful stream, ``datasets``' streaming ``IterableDataset``, any hand-written
``IterableDataset``) has no index and no length: #37 hashed its first rows as a sample, which a
split after packing or a dedup after the split passes whatever its size. Here its items are read
in order on a copy (:func:`~.reading.readable` inside :func:`~.reading.untouched`: the run's stream,
its position and the random states are put back; no worker is started) until
:data:`~.reading.STREAM_TOKENS` token ids, and joined into the token stream they were cut from: a
window whose labels are its inputs shifted by one contributes its inputs and its last label (the
``block_size + 1`` tokens it was cut as), any other row its inputs. Validation windows are then
checked against every train token read (:func:`~lightning_order.checks.windows.window_overlap`).

What the read can prove: twin documents found are facts (every token of a validation document in
the train tokens read); their share of the validation windows is a lower bound of the true one
when the train stream was read only in part, and exact when it ended within the budget. What it
cannot: a twin whose train copy lies beyond the budget (a leak of share ``r`` shows as about
``r`` times the share of train read), and a split after packing of disjoint blocks (no validation
token is then in train; windows that overlap their neighbours by 16 tokens or more, nanoGPT's
every window, are found). Figures: docs/validator.md.
"""

from __future__ import annotations

import copy
import inspect
import io
import itertools
import logging
import operator
import random
import types
import weakref
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from lightning_order.distributed import rank_zero_info

__all__ = [
    "KEY_HASH",
    "READ_BYTES",
    "READ_TOKENS",
    "SPLIT_LOADERS",
    "STREAM_TOKENS",
    "StreamRead",
    "WHOLE_BYTES",
    "WHOLE_TOKENS",
    "as_numpy",
    "batch_field",
    "batch_inputs",
    "is_label",
    "isolated_rng",
    "is_stream",
    "item_size",
    "item_tokens",
    "leaf_array",
    "leaves",
    "note_unread",
    "observed_dims",
    "peek_batches",
    "read_split_tokens",
    "readable",
    "rows_within",
    "sample_batch",
    "split_dataset",
    "split_key_hashes",
    "train_loader",
    "unreadable",
    "untouched",
]

log = logging.getLogger(__name__)


# == How much one read may hold ====================================================================
#: Bytes of items one read holds at once (64 MiB).
READ_BYTES = 64 << 20
#: Token ids (elements of integer arrays) one read holds at once (4M: 128 rows of 32k tokens).
READ_TOKENS = 1 << 22
#: A split is hashed whole only while its items hold at most this many bytes (1 GiB) ...
WHOLE_BYTES = 1 << 30
#: ... and at most this many token ids (64M), read :data:`READ_BYTES` at a time.
WHOLE_TOKENS = 1 << 26
#: Token ids read off each iterable split for the overlap check (4M: 32 MiB as int64, a few seconds
#: of reading and hashing; docs/validator.md gives the share of train it covers and what it finds).
STREAM_TOKENS = 1 << 22


def item_size(item: Any) -> tuple[int, int]:
    """``(bytes, tokens)`` of one item or collated batch: its arrays' bytes and text, its integer elements.

    Nested dicts, lists and tuples are summed; other leaves (numbers) count a few bytes.
    """
    if torch.is_tensor(item):
        integer = not item.is_floating_point() and not item.is_complex() and item.dtype != torch.bool
        return int(item.nelement() * item.element_size()), int(item.nelement()) if integer else 0
    if isinstance(item, np.ndarray):
        return int(item.nbytes), int(item.size) if np.issubdtype(item.dtype, np.integer) else 0
    if isinstance(item, (str, bytes, bytearray)):
        return len(item), 0
    if isinstance(item, Mapping):
        item = list(item.values())
    if isinstance(item, (list, tuple)):
        sizes = [item_size(x) for x in item]
        return sum(s[0] for s in sizes), sum(s[1] for s in sizes)
    return 8, 0


def rows_within(
    size: tuple[int, int], rows: int, max_bytes: int = READ_BYTES, max_tokens: int = READ_TOKENS
) -> int:
    """How many of ``rows`` items of ``size`` (:func:`item_size`) fit the budgets; at least one.

    Args:
        size: ``(bytes, tokens)`` of one item.
        rows: the rows wanted.
        max_bytes: the bytes budget.
        max_tokens: the tokens budget.
    """
    item_bytes, item_tokens = size
    fit = rows
    if item_bytes:
        fit = min(fit, max_bytes // item_bytes)
    if item_tokens:
        fit = min(fit, max_tokens // item_tokens)
    return max(1, min(rows, fit))


# == Reading without moving the run ================================================================
_CONTAINERS = (list, dict, set, bytearray, deque)
#: Leaves of the walk: immutable, or data the validator reads but never mutates.
_ATOMS = (
    str, bytes, int, float, complex, bool, type(None), range, frozenset, torch.Tensor, np.ndarray, np.generic,
    type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
)  # fmt: skip
#: How deep the walk goes below a dataset or sampler, how many objects it visits, and how many
#: elements of one container it looks into (a list of readers, not a list of a million rows).
_DEPTH, _OBJECTS, _ELEMENTS = 4, 20_000, 256
#: The objects noted as unread already: one note per dataset, however many checks skip it.
_NOTED: weakref.WeakSet[Any] = weakref.WeakSet()
#: Stateful objects a read put back: the state put back, and what ``state_dict()`` answered right after.
_PUT_BACK: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()


def _takes_no_arguments(method: Any) -> bool:
    try:
        inspect.signature(method).bind()
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): assume the usual form
        return True
    return True


def _has_state_methods(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def _stateful(obj: Any) -> bool:
    """Whether ``obj``'s state can be saved and loaded back: ``state_dict()`` with no arguments."""
    return _has_state_methods(obj) and _takes_no_arguments(obj.state_dict)


def _rng(obj: Any) -> tuple[Any, Any] | None:
    """``(get, set)`` of a random number generator's state, or ``None`` for anything else."""
    if isinstance(obj, torch.Generator):
        return obj.get_state, obj.set_state
    if isinstance(obj, np.random.Generator):
        obj = obj.bit_generator
    if isinstance(obj, np.random.BitGenerator):
        bits = obj
        return (lambda: bits.state), (lambda state: setattr(bits, "state", state))
    if isinstance(obj, np.random.RandomState):
        return obj.get_state, obj.set_state
    if isinstance(obj, random.Random):
        return obj.getstate, obj.setstate
    return None


@dataclass
class _Snapshot:
    """What a walk saw, to be put back: objects' attributes, containers' contents, generators' states."""

    attributes: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    contents: list[tuple[Any, Any]] = field(default_factory=list)
    states: list[tuple[Any, Any]] = field(default_factory=list)
    #: Why what was walked cannot be read without being moved (``None``: it can).
    blocked: str | None = None

    def restore(self) -> None:
        for setter, state in self.states:
            setter(state)
        for container, saved in self.contents:
            _refill(container, saved)
        for now, saved in self.attributes:
            if now.keys() != saved.keys() or any(now[k] is not v for k, v in saved.items()):
                now.clear()
                now.update(saved)


def _refill(container: Any, saved: Any) -> None:
    """Puts ``saved`` back into ``container`` in place, when reading changed it."""
    # Compared by identity, in C (map + operator.is_): a list of a million rows costs milliseconds.
    if isinstance(container, dict):
        same = container.keys() == saved.keys() and all(map(operator.is_, container.values(), saved.values()))
        if not same:
            container.clear()
            container.update(saved)
    elif isinstance(container, set):
        if container != saved:
            container.clear()
            container.update(saved)
    elif len(container) != len(saved) or not all(map(operator.is_, container, saved)):
        container.clear()
        container.extend(saved)


def _children(obj: Any, path: str) -> list[tuple[Any, str]]:
    if isinstance(obj, dict):
        return [(v, f"{path}[{k!r}]") for k, v in itertools.islice(obj.items(), _ELEMENTS)]
    if isinstance(obj, (list, tuple, set, deque)):
        return [(v, f"{path}[{i}]") for i, v in enumerate(itertools.islice(obj, _ELEMENTS))]
    attributes = getattr(obj, "__dict__", None)
    if isinstance(attributes, dict):
        return [(v, f"{path}.{k}") for k, v in attributes.items()]
    return []


def _outside_data(obj: Any) -> bool:
    """A model, a Trainer or a datamodule reached from a dataset: run state that reading never moves.

    Not walked: their loops and fetchers may hold live iterators that would block the read, and
    their attributes are the run's, not the dataset's. Looked up on the class (no ``__getattr__``).
    """
    kind = type(obj)
    return (
        isinstance(obj, torch.nn.Module)
        or hasattr(kind, "fit_loop")
        or (hasattr(kind, "prepare_data") and hasattr(kind, "train_dataloader"))
    )


def _walk(roots: list[tuple[Any, str]]) -> _Snapshot:
    """The snapshot of everything reachable from ``roots`` (``(object, name)`` pairs)."""
    snap, seen = _Snapshot(), set()
    stack = [(obj, name, 0) for obj, name in reversed(roots)]
    while stack and len(seen) < _OBJECTS:
        obj, path, depth = stack.pop()
        if isinstance(obj, _ATOMS) or id(obj) in seen or _outside_data(obj):
            continue
        seen.add(id(obj))
        rng = _rng(obj)
        if rng is not None:
            snap.states.append((rng[1], copy.deepcopy(rng[0]())))
            continue
        if isinstance(obj, io.IOBase):
            if not obj.closed and obj.seekable():
                snap.states.append((obj.seek, obj.tell()))
            elif not obj.closed:
                snap.blocked = snap.blocked or f"it reads an unseekable stream ({path})"
            continue
        if isinstance(obj, Iterator):  # never next() it to find out: that would move it already
            snap.blocked = snap.blocked or f"it keeps an open iterator ({path}, {type(obj).__name__})"
            continue
        if isinstance(obj, _CONTAINERS):
            snap.contents.append((obj, copy.copy(obj)))
        elif isinstance(getattr(obj, "__dict__", None), dict):
            snap.attributes.append((vars(obj), dict(vars(obj))))
        if depth < _DEPTH:
            stack += [(child, name, depth + 1) for child, name in reversed(_children(obj, path))]
    return snap


def _read_roots(loader: Any, others: tuple[Any, ...]) -> list[Any]:
    """The objects reading ``loader`` touches: its dataset, sampler and batch sampler, or ``loader``
    itself when it is no loader (a dataset), and ``others``."""
    if isinstance(
        loader, torch.utils.data.DataLoader
    ):  # not any object with .dataset: a wrapper dataset has one
        found = [getattr(loader, name, None) for name in ("dataset", "sampler", "batch_sampler")]
    else:
        found = [loader]
    unique: list[Any] = []
    for obj in (*found, *others):
        if obj is not None and all(obj is not u for u in unique):
            unique.append(obj)
    return unique


def _saved_state(obj: Any) -> tuple[Any, str | None]:
    """``(state, None)`` from a stateful object's ``state_dict()``, or ``(None, why not)``."""
    if not _takes_no_arguments(obj.state_dict):
        params = ", ".join(inspect.signature(obj.state_dict).parameters)
        return (
            None,
            f"its state_dict takes arguments ({params}), so its position cannot be saved and put back",
        )
    try:
        state = obj.state_dict()
        put_back = _PUT_BACK.get(obj)
        if put_back is not None and _same(state, put_back[1]):
            # Nothing iterated it since a read put a state back: the run starts from that state, even
            # where state_dict() still answers the read's last one (datasets' streaming IterableDataset
            # does until a new iteration starts; saving that would put the end of the stream back).
            state = put_back[0]
        return copy.deepcopy(state), None
    except Exception as err:  # a state that cannot be taken or copied: reading could not be undone
        return None, f"its state cannot be saved and copied ({type(err).__name__}: {err})".replace("\n", " ")


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # states that cannot be compared (arrays): taken as moved
        return False


def _put_back(obj: Any, state: Any) -> None:
    """``obj.load_state_dict(state)``, remembering what it answers next (see :func:`_saved_state`)."""
    obj.load_state_dict(state)
    try:
        _PUT_BACK[obj] = (state, copy.deepcopy(obj.state_dict()))
    except Exception:  # no weak reference to it, or a state that cannot be copied: nothing remembered
        log.debug("OrderValidator: %s's restored state not remembered", type(obj).__name__)


@contextmanager
def isolated_rng() -> Iterator[None]:
    """Python's, NumPy's and torch's global random states (every CUDA device's too) put back on exit.

    What a dataset or a collate function draws while it is read (an augmentation, a random crop)
    must not move the run's own draws; Lightning's ``isolate_rng`` does the same, here without
    Lightning so that the plain loops' guard can use it.
    """
    python_state, numpy_state, torch_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)


@contextmanager
def untouched(loader: Any, *others: Any) -> Iterator[str | None]:
    """Everything reading ``loader`` (and ``others``) can move, put back on exit.

    Yields ``None`` when what is read can be put back; else why not, and then the caller reads
    nothing (see :func:`note_unread`).

    Args:
        loader: the dataloader about to be read (its ``dataset``, ``sampler``, ``batch_sampler``), or
            a dataset read by index.
        *others: more objects about to be read (a sampler walked on its own).
    """
    roots = _read_roots(loader, others)
    states: list[tuple[Any, Any]] = []
    blocked: str | None = None
    walked: list[tuple[Any, str]] = []
    for obj in roots:
        name = type(obj).__name__
        if _has_state_methods(obj):
            state, why = _saved_state(obj)
            if why is not None:
                blocked = blocked or why
            else:
                states.append((obj, state))
        elif isinstance(obj, Iterator):
            blocked = blocked or "it is its own iterator: reading it is consuming it"
        else:
            walked.append((obj, name))
    snap = _walk(walked)
    blocked = blocked or snap.blocked
    try:
        with isolated_rng():
            yield blocked
    finally:
        snap.restore()
        for owner, state in states:
            _put_back(owner, state)


def unreadable(obj: Any) -> str | None:
    """Why ``obj`` (a dataset, a sampler) cannot be read without being moved, or ``None`` (it can)."""
    with untouched(obj) as blocked:
        return blocked


def note_unread(obj: Any, reason: str) -> None:
    """The one-line note that ``obj`` is not read, and why (once per object, when it can be weakly referenced)."""
    name = type(obj).__name__
    try:
        if obj in _NOTED:
            return
        _NOTED.add(obj)
    except TypeError:  # no weak reference to it: noted each time
        pass
    rank_zero_info(
        f"OrderValidator: {name} not read ({reason}): the checks that need its rows are skipped, the run's "
        "data is left as it is; to have it read, keep its position in attributes or give it "
        "state_dict()/load_state_dict(state), and open iterators only in __iter__"
    )


def readable(iterable: Any) -> Any:
    """What to iterate instead of ``iterable`` (a dataset, a sampler) inside :func:`untouched`.

    The object itself when it has ``state_dict()`` / ``load_state_dict`` (:func:`untouched` loads
    its state back); else a shallow copy whose lists, dicts and sets are copied (what it rebinds on
    itself stays on the copy; what it changes below is put back by :func:`untouched`); ``None``
    when it cannot be read without consuming it (:func:`unreadable`).
    """
    if unreadable(iterable) is not None:
        return None
    if _stateful(iterable):
        return iterable
    attributes = vars(iterable) if hasattr(iterable, "__dict__") else {}
    twin = copy.copy(iterable)
    for name, value in attributes.items():
        if isinstance(value, _CONTAINERS):
            setattr(twin, name, copy.copy(value))
    return twin


def peek_batches(loader: Any, rows: int) -> list[Any]:
    """The first batches of an iterable-dataset loader, up to ``rows`` rows, without consuming it.

    Read in this process (no workers: the run's own workers are never started here), through
    :func:`readable`, inside :func:`untouched`; bounded by ``rows`` and by the read budgets
    (:data:`READ_BYTES`, :data:`READ_TOKENS`; at least one batch).

    Args:
        loader: a ``DataLoader`` over an ``IterableDataset``.
        rows: rows to read at most (whole batches: the last one may go past it).

    Returns:
        The batches read, as the loader collates them; empty when the dataset cannot be read
        without consuming it (noted once, :func:`note_unread`).
    """
    dataset = getattr(loader, "dataset", None)
    batches: list[Any] = []
    if dataset is None:
        return batches
    with untouched(loader) as blocked:
        twin = readable(dataset) if blocked is None else None
        if twin is None:
            note_unread(dataset, blocked or "it cannot be read without consuming it")
            return []
        reader = torch.utils.data.DataLoader(
            twin,
            batch_size=getattr(loader, "batch_size", None),
            collate_fn=getattr(loader, "collate_fn", None),
            drop_last=bool(getattr(loader, "drop_last", False)),
        )
        seen, held, tokens = 0, 0, 0
        batch_iter = iter(reader)
        for batch in batch_iter:
            batches.append(batch)
            seen += _rows(batch)
            size = item_size(batch)
            held, tokens = held + size[0], tokens + size[1]
            if seen >= rows or held >= READ_BYTES or tokens >= READ_TOKENS:
                break
        del batch_iter  # its generator is closed here, before the states are put back
    return batches


def _rows(batch: Any) -> int:
    """How many rows a collated batch holds (its first tensor's length; 1 when it has none)."""
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for value in batch:
            if torch.is_tensor(value) and value.ndim:
                return int(value.shape[0])
    return int(batch.shape[0]) if torch.is_tensor(batch) and batch.ndim else 1


# == The items behind a datamodule's loaders =======================================================
#: The column of an encoded split that holds the hash of each row's cleaned key.
KEY_HASH = "key_hash"


def split_key_hashes(dm: Any, split: str) -> np.ndarray | None:
    """The ``key_hash`` column of a split (this rank's shard for train), read from Arrow alone.

    A datamodule may offer ``key_hashes(split)``; otherwise the column is read from the dataset
    behind its dataloader (``OrderedDataModule`` keeps it in every encoded split).
    """
    method = getattr(dm, "key_hashes", None)
    if callable(method):
        hashes = method(split)
        return None if hashes is None else np.asarray(hashes, dtype=np.int64)
    try:
        loader = getattr(dm, f"{split}_dataloader")()
    except Exception as err:  # no such split, or not set up: no hashes
        log.debug("OrderValidator: no %s key hashes (%s)", split, err)
        return None
    dataset = getattr(loader, "dataset", None)
    if KEY_HASH not in (getattr(dataset, "column_names", None) or ()):
        return None
    # Arrow format reads the column (through any shard/select indices) without per-row Python.
    return dataset.with_format("arrow")[KEY_HASH].to_numpy().astype(np.int64, copy=False)


# -- the items behind its dataloaders ---------------------------------------------------------
#: The splits read, and the dataloader method of each.
SPLIT_LOADERS = {"train": "train_dataloader", "val": "val_dataloader"}
_LABEL_KEYS = frozenset({"label", "labels", "y", "target", "targets", "key_hash"})


def split_dataset(dm: Any, split: str) -> tuple[Any, Any]:
    """The map-style dataset behind a split's dataloader and its collate function, or ``(None, None)``."""
    try:
        loader = getattr(dm, SPLIT_LOADERS[split])()
    except Exception as err:  # no such split, or not set up: nothing to read
        log.debug("OrderValidator: no %s dataset (%s)", split, err)
        return None, None
    if isinstance(loader, (list, tuple)):
        loader = loader[0] if loader else None
    dataset = getattr(loader, "dataset", None)
    if (
        dataset is None
        or isinstance(dataset, torch.utils.data.IterableDataset)
        or not hasattr(dataset, "__len__")
    ):
        return None, None
    return dataset, getattr(loader, "collate_fn", None) or torch.utils.data.default_collate


def train_loader(trainer: Any) -> torch.utils.data.DataLoader | None:
    """The train ``DataLoader`` Lightning will iterate (the first one of a collection), or ``None``."""
    loader = getattr(trainer, "train_dataloader", None)
    if isinstance(loader, dict):
        loader = next(iter(loader.values()), None)
    if isinstance(loader, (list, tuple)):
        loader = loader[0] if loader else None
    return loader if isinstance(loader, torch.utils.data.DataLoader) else None


def leaves(item: Any, path: str = "") -> list[tuple[str, Any]]:
    """``(path, leaf)`` pairs of an item: dict keys sorted; in a tuple, the last element is the label."""
    if isinstance(item, Mapping):
        return [pair for key in sorted(item, key=str) for pair in leaves(item[key], f"{path}{key}")]
    if isinstance(item, (list, tuple)) and not path and len(item) >= 2:
        return [pair for i, x in enumerate(item[:-1]) for pair in leaves(x, f"{i}")] + [("label", item[-1])]
    return [(path or "0", item)]


def is_label(path: str) -> bool:
    """Whether a leaf's path names the label (or the key hash, which is no input either)."""
    return path.lower() in _LABEL_KEYS


def leaf_array(value: Any) -> np.ndarray | None:
    """A tensor or array leaf as a numpy array; ``None`` for anything else (text, numbers)."""
    if torch.is_tensor(value):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    return None


# == Sampled batches ===============================================================================
def sample_batch(dm: Any, loader_name: str, rows: int) -> tuple[Any, int | None]:
    """Up to ``rows`` rows of a datamodule's dataloader, collated as one batch, and the dataset size.

    Map-style datasets are indexed directly (a fixed seed, so every rank samples the same rows of
    the same data) without starting workers; iterable ones yield their first batches, read without
    consuming the stream (:func:`peek_batches`). Both are read inside :func:`untouched` and bounded
    by the read budgets (:data:`READ_BYTES`, :data:`READ_TOKENS`) too: ``rows`` of 128k
    tokens are cut to what fits (at least one).

    Args:
        dm: the datamodule.
        loader_name: ``"train_dataloader"`` or ``"val_dataloader"``.
        rows: rows to read at most.

    Returns:
        ``(batch, size)``: ``(None, None)`` when there is nothing to read; ``size`` is ``None``
        for an iterable dataset.
    """
    try:
        loader = getattr(dm, loader_name)()
    except Exception as err:  # a datamodule without that split, or not ready: nothing to sample
        log.debug("OrderValidator: no %s to sample (%s)", loader_name, err)
        return None, None
    if isinstance(loader, (list, tuple)):
        loader = loader[0] if loader else None
    dataset = getattr(loader, "dataset", None)
    if loader is None or dataset is None:
        return None, None
    collate = getattr(loader, "collate_fn", None) or torch.utils.data.default_collate
    if not isinstance(dataset, torch.utils.data.IterableDataset) and hasattr(dataset, "__len__"):
        size = len(dataset)
        if size == 0:
            return None, 0
        getitems = getattr(dataset, "__getitems__", None)
        with untouched(
            loader
        ) as blocked:  # an augmentation, a generator or a counter on the dataset: put back
            if blocked is not None:
                note_unread(dataset, blocked)
                return None, size
            # The first row sampled sizes the read: rows bounded by tokens and bytes as well.
            first = int(np.random.default_rng(0).choice(size, size=min(rows, size), replace=False).min())
            rows = rows_within(item_size(dataset[first]), rows)
            picked = np.sort(np.random.default_rng(0).choice(size, size=min(rows, size), replace=False))
            items = getitems(picked.tolist()) if callable(getitems) else [dataset[int(i)] for i in picked]
        return collate(items), size
    # Read without consuming: the run must start on the batch it would have started on without us.
    batches = peek_batches(loader, rows)
    return (_concat(batches) if batches else None), None


def batch_field(batch: Any, key: str) -> Any:
    """``batch[key]`` of a dict batch; of a tuple, the last element as ``"labels"``, the first as
    ``"features"`` (floating point) or ``"input_ids"`` (integer). ``None`` when there is none."""
    if isinstance(batch, Mapping):
        return batch.get(key)
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        first = batch[0]
        if key == "labels":
            return batch[-1]
        is_float = torch.is_tensor(first) and first.is_floating_point()
        if key == "features" and is_float:
            return first
        if key == "input_ids" and torch.is_tensor(first) and not is_float:
            return first
    return None


def _concat(batches: list[Any]) -> Any:
    """Batches of one structure joined along rows, however nested (torchtitan's ``({"input": x}, y)``);
    what is not a tensor is left out of a mapping and kept as the first batch's in a tuple."""
    first = batches[0]
    if torch.is_tensor(first):
        return torch.cat(batches) if first.ndim else first
    if isinstance(first, Mapping):
        return {k: _concat([b[k] for b in batches]) for k in first if _has_tensor(first[k])}
    if isinstance(first, (list, tuple)):
        return type(first)(_concat([b[i] for b in batches]) for i in range(len(first)))
    return first


def _has_tensor(value: Any) -> bool:
    if torch.is_tensor(value):
        return True
    if isinstance(value, Mapping):
        return any(_has_tensor(v) for v in value.values())
    return isinstance(value, (list, tuple)) and any(_has_tensor(v) for v in value)


def as_numpy(value: Any) -> np.ndarray | None:
    """A tensor (on any device) or array-like as a numpy array; ``None`` stays ``None``."""
    if value is None:
        return None
    if torch.is_tensor(value):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def batch_inputs(batch: Any) -> list[np.ndarray]:
    """The model inputs of a batch (everything but the labels and key hashes), as numpy arrays."""
    if batch is None:
        return []
    if isinstance(batch, Mapping):
        keys = [k for k in sorted(batch) if k not in ("labels", "label", "y", KEY_HASH)]
        return [a for a in (as_numpy(batch[k]) for k in keys) if a is not None and a.ndim >= 1]
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        return [a for a in (as_numpy(x) for x in batch[:-1]) if a is not None and a.ndim >= 1]
    return []


def observed_dims(batch: Any) -> dict[str, Any]:
    """What a sampled batch shows about the data's dims (lower bounds): ``max_token_id``,
    ``num_features`` (the width of ``features``), ``max_label``."""
    observed: dict[str, Any] = {}
    ids = as_numpy(batch_field(batch, "input_ids"))
    if ids is not None and ids.size and np.issubdtype(ids.dtype, np.integer):
        observed["max_token_id"] = int(ids.max())
    features = as_numpy(batch_field(batch, "features"))
    if features is not None and features.ndim == 2:
        observed["num_features"] = int(features.shape[1])
    labels = as_numpy(batch_field(batch, "labels"))
    if labels is not None and labels.size and np.issubdtype(labels.dtype, np.integer) and labels.ndim == 1:
        observed["max_label"] = int(labels.max())
    return observed


# == An iterable split as token ids ================================================================
@dataclass(frozen=True)
class StreamRead:
    """A split's token ids as read.

    Attributes:
        tokens: the ids, joined in reading order (a 1-D int64 array).
        window: tokens per window (the rows' inputs plus the label's extra token), the longest row read.
        rows: rows read.
        whole: the split ended within the budget (every row was read).
    """

    tokens: np.ndarray
    window: int
    rows: int
    whole: bool


def _ids(value: Any) -> np.ndarray | None:
    """An integer array (or a list of ints, as ``datasets`` yields) as an int64 array of rows."""
    array = leaf_array(value)
    if (
        array is None
        and isinstance(value, (list, tuple))
        and value
        and isinstance(value[0], (int, np.integer))
    ):
        array = np.asarray(value)
    if (
        array is None
        or not array.size
        or not np.issubdtype(array.dtype, np.integer)
        or array.ndim not in (1, 2)
    ):
        return None
    return np.atleast_2d(array).astype(np.int64, copy=False)


def item_tokens(item: Any) -> list[np.ndarray]:
    """The windows an item (or a batch an iterable yields) holds, each as the tokens it was cut as.

    The input ids are the first integer leaf that is neither the label nor a mask; when the labels
    are the inputs shifted by one, each row gets its last label back (``x + y[-1:]``).
    """
    found = [(path, leaf) for path, leaf in leaves(item)]
    inputs = next(
        (
            ids
            for path, leaf in found
            if not is_label(path) and "mask" not in path.lower() and "position" not in path.lower()
            for ids in [_ids(leaf)]
            if ids is not None
        ),
        None,
    )
    if inputs is None:
        return []
    labels = next((_ids(leaf) for path, leaf in found if is_label(path) and _ids(leaf) is not None), None)
    shifted = (
        labels is not None
        and labels.shape == inputs.shape
        and inputs.shape[1] > 1
        and np.array_equal(labels[:, :-1], inputs[:, 1:])
    )
    if shifted and labels is not None:
        return list(np.concatenate([inputs, labels[:, -1:]], axis=1))
    return list(inputs)


#: Items stacked per conversion (``default_collate``): the per-item cost of a Python stream is paid once per group.
_GROUP = 512


def _rows_of(items: list[Any]) -> list[np.ndarray]:
    """:func:`item_tokens` of a group of items: stacked when they stack into one row each, else one by one."""
    try:
        rows = item_tokens(torch.utils.data.default_collate(items))
    except Exception:  # ragged rows, text, lists of different lengths: item by item
        rows = []
    if len(rows) != len(items):  # items that are batches already, or that did not stack
        rows = [row for item in items for row in item_tokens(item)]
    return rows


#: Marks the end of a stream (an item may be anything, ``None`` included).
_END = object()


def _from_rows(rows: Any, max_tokens: int) -> StreamRead | None:
    """Reads windows off an iterator of items until ``max_tokens``."""
    pieces: list[np.ndarray] = []
    count, tokens, window, whole = 0, 0, 0, True
    group: list[Any] = []
    for item in itertools.chain(rows, [_END]):
        if item is not _END:
            group.append(item)
            # The first item alone sizes the groups, so a group never reads far past the budget.
            wanted = 1 if not window else min(_GROUP, -(-(max_tokens - tokens) // window))
            if len(group) < max(1, wanted):
                continue
        for row in _rows_of(group) if group else []:
            pieces.append(row)
            count, tokens, window = count + 1, tokens + row.size, max(window, row.size)
        group = []
        if tokens >= max_tokens:
            whole = item is _END
            break
    if not pieces:
        return None
    return StreamRead(np.concatenate(pieces), window, count, whole)


def _loader(dm: Any, split: str) -> Any:
    try:
        loader = getattr(dm, SPLIT_LOADERS[split])()
    except Exception as err:  # no such split, or not set up: nothing to read
        log.debug("OrderValidator: no %s loader (%s)", split, err)
        return None
    if isinstance(loader, (list, tuple)):
        loader = loader[0] if loader else None
    return loader


def is_stream(dm: Any, split: str) -> bool:
    """Whether a split's loader reads an iterable dataset (no index, no length)."""
    dataset = getattr(_loader(dm, split), "dataset", None) if dm is not None else None
    return dataset is not None and (
        isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(dataset, "__len__")
    )


def read_split_tokens(dm: Any, split: str, max_tokens: int = STREAM_TOKENS) -> StreamRead | None:
    """A split's first ``max_tokens`` token ids (whole rows), read without moving the run's data.

    An iterable dataset is read on a copy in this process, items in order; a map-style one by
    index, from item 0. ``None`` when the split has no token ids, or cannot be read without being
    consumed (noted once, :func:`~.reading.note_unread`).

    Args:
        dm: the datamodule.
        split: ``"train"`` or ``"val"``.
        max_tokens: token ids read at most (the last row read may pass it).
    """
    loader = _loader(dm, split) if dm is not None else None
    dataset = getattr(loader, "dataset", None)
    if dataset is None:
        return None
    iterable = isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(dataset, "__len__")
    try:
        with untouched(dataset) as blocked:
            if blocked is not None:
                note_unread(dataset, blocked)
                return None
            if not iterable:
                return _from_rows((dataset[i] for i in range(len(dataset))), max_tokens)
            twin = readable(dataset)
            if twin is None:
                note_unread(dataset, "it cannot be read without consuming it")
                return None
            rows = iter(twin)
            try:
                return _from_rows(rows, max_tokens)
            finally:
                close = getattr(rows, "close", None)
                if callable(close):  # a generator is closed before the states are put back
                    close()
    except Exception as err:  # a stream that fails off its worker or device: no stream evidence
        log.debug("OrderValidator: could not read %s as a token stream (%s)", split, err)
        return None
