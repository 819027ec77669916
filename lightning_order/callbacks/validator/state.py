"""What one run of ``OrderValidator`` knows between its hooks: one state object, reset by ``setup``.

Lightning calls the hooks in an order it fixes (``setup``, the weight restore, the callback
state's restore, ``on_fit_start``, ``on_train_start``, ...); each leaves here what a later one
needs. Two sets say where the run stands: how a checkpoint of this run has shown itself
(:class:`CheckpointSeen`) and which once-per-run steps are done (:class:`Done`); a hook asks them
a question (:attr:`ValidatorState.resuming`, :attr:`ValidatorState.resume_unchecked`) instead of
combining flags. Nothing here goes into a checkpoint: the callback's ``state_dict`` saves the
data's identity, content sample and position, kept as the callback's public attributes;
:func:`saved_state` reads them back.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

from lightning_order.errors import CheckpointError

__all__ = ["CheckpointSeen", "Done", "SavedState", "ValidatorState", "saved_state"]


class CheckpointSeen(Enum):
    """How a checkpoint of this run has shown itself to the validator (both may happen)."""

    #: Its file was read before the weights were restored (``trainer.ckpt_path`` set by the user,
    #: or the wrapped ``load_model_state_dict``): the resume check ran on its stored fingerprints.
    FILE = "file"
    #: Lightning loaded the validator's saved state (``load_state_dict``): the callback's
    #: ``fingerprints``, ``dims`` and ``position`` are the checkpoint's, not this run's.
    STATE = "state"


class Done(Enum):
    """The once-per-run steps of the validator that have happened."""

    #: The checkpoint's data fingerprints were compared with this run's.
    RESUME_CHECKED = "resume-checked"
    #: The model's dims (and an LM run's rows and tokenizer) were checked against the data's.
    MODEL_CHECKED = "model-checked"
    #: ``evaluate`` was recorded in the ledger (the first real validation after training).
    EVALUATE_RECORDED = "evaluate-recorded"


@dataclass
class ValidatorState:
    """What the validator learnt in this run's hooks, for its later hooks.

    Attributes:
        fingerprints: this run's data fingerprints as ``setup`` found them (every check compares
            against these, whatever a checkpoint's state later put into the callback's own).
        dims: this run's data dims as ``setup`` found them.
        observed: what sampled batches showed about the dims of a datamodule without ``dims``.
        evidence: what the latest checks had to go on (overlap, label encoding, same-row floats).
        tokenizer: the fingerprint of the tokenizer in use at ``setup``, or ``None``.
        content: this run's content sample for a datamodule without a ledger (the tokenizer and
            item hashes per split, :mod:`lightning_order.checks.resume_content`), else empty.
        seen: how a checkpoint of this run has shown itself.
        done: the once-per-run steps that have happened.
        stored_position: the data position in the checkpoint's file, as the resume check read it.
        loader_states: the checkpoint's train loader states (Lightning's), judged in ``on_fit_start``
            before Lightning restores them.
        trainer: a weak reference to the Trainer while fitting (``state_dict`` saves its live
            position); ``None`` before ``setup``.
        guarded: the strategy whose ``load_model_state_dict`` the validator wraps, or ``None``;
            it outlives a ``setup`` (``teardown`` or an exception removes the wrapper).
    """

    fingerprints: dict[str, str] = field(default_factory=dict)
    dims: dict[str, Any] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    tokenizer: str | None = None
    content: dict[str, Any] = field(default_factory=dict)
    seen: set[CheckpointSeen] = field(default_factory=set)
    done: set[Done] = field(default_factory=set)
    stored_position: dict[str, Any] | None = None
    loader_states: list[Any] = field(default_factory=list)
    trainer: weakref.ReferenceType[Any] | None = None
    guarded: Any = None

    @property
    def resuming(self) -> bool:
        """Whether this run resumes from a checkpoint (its file read, or its state restored)."""
        return bool(self.seen)

    @property
    def resume_unchecked(self) -> bool:
        """Whether a restored state still waits for the resume check (no file was read first)."""
        return CheckpointSeen.STATE in self.seen and Done.RESUME_CHECKED not in self.done


class SavedState(NamedTuple):
    """What ``OrderValidator.state_dict`` saves (the callback's public attributes of the same names)."""

    fingerprints: dict[str, str]
    dims: dict[str, Any]
    position: dict[str, Any] | None
    content: dict[str, Any]


def saved_state(state_dict: Any) -> SavedState:
    """What ``OrderValidator.state_dict`` saved, read back.

    Older or foreign states may lack keys (or hold a ``"version"``): they are defaulted, never a
    failed resume.

    Raises:
        CheckpointError: the state is no state of ``OrderValidator``'s (damaged, or written by
            something else).
    """
    if not isinstance(state_dict, Mapping) or not isinstance(state_dict.get("fingerprints") or {}, Mapping):
        raise CheckpointError(
            f"the checkpoint's OrderValidator state is not what OrderValidator saves (got "
            f"{type(state_dict).__name__}): the checkpoint is damaged or was written by something else; "
            "resume from an intact checkpoint"
        )
    return SavedState(
        fingerprints={str(k): str(v) for k, v in (state_dict.get("fingerprints") or {}).items()},
        dims=dict(state_dict.get("dims") or {}),
        position=dict(state_dict["position"]) if state_dict.get("position") else None,
        content=dict(state_dict.get("content") or {}),
    )
