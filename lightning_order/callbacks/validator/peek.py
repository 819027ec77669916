"""Reading a run's data without changing what the run trains on.

The validator looks at items and batches before step 1; the run must then start exactly where it
would have without the validator (issue #37, item 9; issue #42, item 2). Every read goes through
:func:`untouched`, which puts back what reading can move:

- the global random number generators (``torch``, CUDA, ``numpy``, ``random``: a
  ``RandomSampler`` without a generator, nanoGPT's ``get_batch``, an augmentation in
  ``__getitem__``), restored with Lightning's ``isolate_rng``;
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from pytorch_lightning.utilities.rank_zero import rank_zero_info
from pytorch_lightning.utilities.seed import isolate_rng

from lightning_order.callbacks.validator.budget import READ_BYTES, READ_TOKENS, item_size

__all__ = ["note_unread", "peek_batches", "readable", "unreadable", "untouched"]

log = logging.getLogger(__name__)

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
        with isolate_rng():
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
    :func:`readable`, inside :func:`untouched`; bounded by ``rows`` and by the budgets of
    :mod:`~lightning_order.callbacks.validator.budget` (at least one batch).

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
