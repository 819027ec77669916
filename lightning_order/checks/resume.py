"""Resume checks: was the checkpoint trained on the data this run prepared, and does the loader continue there?

Weights learned on one vocabulary read another vocabulary's token ids as other words; features
scaled with other statistics shift every input. Neither crashes when the sizes happen to match,
so the check compares the data fingerprints stored with the checkpoint to the current ones. A
checkpoint without fingerprints proves nothing (:func:`check_resume_proof`), and weights whose
shapes do not fit are named by the order error behind them (:func:`check_restore_shapes`), never
left to a raw ``Error(s) in loading state_dict``.

The data position is part of the order (docs/architecture.md, "The train order and the position"): :func:`check_resume_position` compares
where the checkpoint's run stood in its epoch (the position it saved) with where the resumed run
will read (Lightning's restored batch count and the train loader's restored position) and counts
the samples the resumed epoch would serve twice or never, in the global order of
:mod:`lightning_order.positions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from lightning_order.ledger import CHECKPOINT_KEY
from lightning_order.positions import TrainPosition, check_position, epoch_order, remaining_positions
from lightning_order.rules import Violation

__all__ = [
    "check_restore_shapes",
    "check_resume",
    "check_resume_position",
    "check_resume_proof",
    "stored_fingerprints",
    "stored_position",
]

# What a change of each fingerprint means for the restored weights, and the step behind it.
_CONSEQUENCE: dict[str, tuple[str, tuple[str, ...]]] = {
    "vocab": ("the vocabulary changed: token ids would silently mean other words", ("build_vocab",)),
    "statistics": (
        "the feature statistics changed: every numeric input is scaled differently",
        ("fit_features",),
    ),
    "split": (
        "the train/validation split changed: validation rows may have been trained on",
        ("split",),
    ),
    "corpus": ("the corpus changed: the run would skip or replay documents", ("load",)),
    "tokenizer": ("the tokenizer changed: token ids would silently mean other text", ("build_vocab",)),
    "manifest": ("the prepared data changed", ("encode",)),
}


def stored_fingerprints(checkpoint: Mapping[str, Any], state_key: str, owner: str) -> dict[str, str]:
    """The data fingerprints a checkpoint was trained on (the ``stored`` side of the checks below).

    Args:
        checkpoint: the checkpoint, as plain data.
        state_key: the validator's state key; its state holds the fingerprints.
        owner: the validator's class name: a state saved under another key of that class (another
            pipeline's) will do; else the top-level copy under ``CHECKPOINT_KEY``.
    """
    states = checkpoint.get("callbacks") or {}
    state = states.get(state_key)
    if state is None:  # saved under another pipeline's key: any state of the owner will do
        state = next((s for k, s in states.items() if str(k).startswith(owner)), None)
    if isinstance(state, Mapping) and state.get("fingerprints"):
        return dict(state["fingerprints"])
    return dict((checkpoint.get(CHECKPOINT_KEY) or {}).get("fingerprints") or {})


def check_resume(stored: Mapping[str, str] | None, current: Mapping[str, str] | None) -> list[Violation]:
    """``resume-data-changed``: the checkpoint's data fingerprints differ from this run's.

    Fingerprints present on one side only are skipped (a checkpoint from an older version, or a
    datamodule without that artefact): only a difference is evidence.

    Args:
        stored: the fingerprints saved with the checkpoint (``{"manifest", "split", "statistics", "vocab"}``).
        current: this run's ``data_fingerprints()``.

    Returns:
        One violation naming every changed fingerprint, or nothing.
    """
    if not stored or not current:
        return []
    changed = [
        key
        for key, value in stored.items()
        if value is not None and current.get(key) is not None and str(value) != str(current[key])
    ]
    if not changed:
        return []
    # The most telling change leads (the manifest changes with anything, so it comes last).
    known = list(_CONSEQUENCE)
    changed.sort(key=lambda k: known.index(k) if k in known else len(known))
    reasons = [_CONSEQUENCE[k][0] if k in _CONSEQUENCE else f"'{k}' changed" for k in changed]
    steps = tuple(dict.fromkeys(s for k in changed for s in _CONSEQUENCE.get(k, ("", ("encode",)))[1]))
    detail = ", ".join(f"{k} {str(stored[k])[:12]} -> {str(current[k])[:12]}" for k in changed)
    return [
        Violation(
            "resume-data-changed",
            steps,
            f"{'; '.join(reasons)} (checkpoint -> this run: {detail})",
            details={"changed": changed, "stored": dict(stored), "current": dict(current)},
        )
    ]


def check_resume_proof(
    stored: Mapping[str, str] | None, current: Mapping[str, str] | None
) -> list[Violation]:
    """A checkpoint without data fingerprints cannot prove that this run's data is the one it learned.

    A checkpoint written without ``OrderValidator`` carries no fingerprints; resuming it onto
    other data (another vocabulary of the same size, other statistics) would go unnoticed. Only
    reported when this run has fingerprints to compare (an ``OrderedDataModule`` or one that
    offers ``data_fingerprints()``).

    Args:
        stored: the fingerprints saved with the checkpoint (``None`` or empty when it has none).
        current: this run's ``data_fingerprints()``.

    Returns:
        One ``resume-data-changed`` violation (the change cannot be ruled out), or nothing.
    """
    if stored or not current:
        return []
    return [
        Violation(
            "resume-data-changed",
            ("encode",),
            "the checkpoint carries no data fingerprints (it was saved by a run without OrderValidator): "
            f"lightning_order cannot prove the data is unchanged (this run: {', '.join(sorted(current))})",
            fix="resume only with the data config the checkpoint was trained on and pass "
            "OrderValidator(on_violation='warn') to accept it once; checkpoints saved with OrderValidator "
            "carry the proof. Or warm-start with lightning_order.recover(path, model_cls=...)",
            details={"stored": {}, "current": dict(current)},
        )
    ]


def check_restore_shapes(
    stored: Mapping[str, tuple[int, ...]],
    model: Mapping[str, tuple[int, ...]],
    model_fits_data: bool,
) -> list[Violation]:
    """Translates weights that cannot be restored (shapes differ) into the order error they mean.

    Args:
        stored: tensor name -> shape in the checkpoint's ``state_dict``.
        model: tensor name -> shape of the model about to receive them.
        model_fits_data: whether the model's dims agree with this run's data. If they do, the
            checkpoint was trained on other data (``resume-data-changed``); if not, the model was
            built before the data's dims were known (``init-before-data``).

    Returns:
        One violation naming every mismatched tensor with both shapes, or nothing.
    """
    mismatched = {
        name: (tuple(shape), tuple(model[name]))
        for name, shape in stored.items()
        if name in model and tuple(shape) != tuple(model[name])
    }
    if not mismatched:
        return []
    shapes = "; ".join(
        f"{name}: checkpoint {list(a)} vs model {list(b)}" for name, (a, b) in mismatched.items()
    )
    details = {
        "shapes": {name: {"checkpoint": list(a), "model": list(b)} for name, (a, b) in mismatched.items()}
    }
    if model_fits_data:
        return [
            Violation(
                "resume-data-changed",
                ("encode", "init_model"),
                f"the checkpoint's weights do not fit this run's data: {shapes}; it was trained on other "
                "prepared data (another vocabulary size, feature count or label set), or the model's "
                "architecture changed since",
                details=details,
            )
        ]
    return [
        Violation(
            "init-before-data",
            ("init_model", "encode"),
            f"the model cannot take the checkpoint's weights: {shapes}; it was built with other dims "
            "than the data's",
            details=details,
        )
    ]


def stored_position(checkpoint: Mapping[str, Any], state_key: str, owner: str) -> dict[str, Any] | None:
    """Where the checkpoint's run stood in its epoch (the ``stored`` side of :func:`check_resume_position`).

    The validator's state (``position``), else the copy under ``CHECKPOINT_KEY``, else the train
    loader's own state in Lightning's loop state (a checkpoint saved without the validator);
    ``None`` when the checkpoint holds none of them.

    Raises:
        CheckpointError: a field no run could have saved (:func:`lightning_order.positions.check_position`).
    """
    states = checkpoint.get("callbacks") or {}
    state = states.get(state_key)
    if state is None:
        state = next((s for k, s in states.items() if str(k).startswith(owner)), None)
    if isinstance(state, Mapping) and state.get("position"):
        check_position(state["position"])
        return dict(state["position"])
    top = (checkpoint.get(CHECKPOINT_KEY) or {}).get("position")
    if isinstance(top, Mapping) and top:
        check_position(top)
        return dict(top)
    fit_loop = ((checkpoint.get("loops") or {}).get("fit_loop") or {}).get("state_dict") or {}
    for loader_state in fit_loop.get("combined_loader") or []:
        if TrainPosition.from_dict(loader_state) is not None:
            return dict(loader_state)
    return None


@dataclass(frozen=True)
class _Span:
    """Global positions ``[start, stop)`` of an epoch's order; ``order``: (size, seed, shuffle, digest) or unknown."""

    epoch: int
    start: int
    stop: int
    order: tuple[int, int, bool, str] | None = None


def _order_of(position: Mapping[str, Any]) -> tuple[int, int, bool, str] | None:
    found = TrainPosition.from_dict(position)
    return None if found is None else (found.dataset_size, found.seed, found.shuffle, found.order)


def _expected(stored: Mapping[str, Any] | None, resumed: Mapping[str, Any], batch: int) -> _Span:
    """What the uninterrupted run reads next in its epoch: from the checkpoint's position, else Lightning's count."""
    if stored and stored.get("samples") is not None and stored.get("global_batch"):
        g, epoch, start = int(stored["global_batch"]), int(stored["epoch"]), int(stored["samples"])
        size = stored.get("dataset_size")
        stop = int(stored["epoch_samples"]) if stored.get("epoch_samples") is not None else None
        if stored.get("epoch_batches") is not None:  # Lightning's limit on the epoch (limit_train_batches)
            limit = int(stored["epoch_batches"]) * g
            stop = limit if stop is None else min(stop, limit)
        if stop is None:  # a checkpoint of a loader without a position: Lightning's epoch, in samples
            stop = (
                remaining_positions(int(size), g, 0)
                if size is not None
                else int(resumed["epoch_batches"]) * g
            )
        order = _order_of(stored)
        if stop is not None and start >= stop:  # the epoch was done: the next one starts at its head
            order = None if order is None else (*order[:3], "")
            return _Span(epoch + 1, 0, stop, order)
        return _Span(epoch, start, stop, order)
    epoch, done, total = int(resumed["epoch"]), int(resumed["batches"]), int(resumed["epoch_batches"])
    return _Span(epoch, done * batch, total * batch)


def _served(resumed: Mapping[str, Any], batch: int) -> _Span:
    """What the resumed run reads in its epoch: the loader's restored position, or the epoch's head."""
    epoch, done, total = int(resumed["epoch"]), int(resumed["batches"]), int(resumed["epoch_batches"])
    nxt = TrainPosition.from_dict(resumed.get("next") or {})
    if nxt is None:  # a loader without a position restarts its epoch; its order is assumed to repeat
        return _Span(epoch, 0, (total - done) * batch)
    # A restored position is read whatever Lightning's epoch; an unrestored loader follows set_epoch.
    ours = nxt.epoch == epoch or bool(resumed.get("restored"))
    epoch, start, digest = (nxt.epoch, nxt.samples, nxt.order) if ours else (epoch, 0, "")
    count = min(
        remaining_positions(nxt.dataset_size, nxt.global_batch, start) // nxt.global_batch, total - done
    )
    return _Span(
        epoch, start, start + count * nxt.global_batch, (nxt.dataset_size, nxt.seed, nxt.shuffle, digest)
    )


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def _counts(expected: _Span, served: _Span) -> tuple[int, int, bool]:
    """``(replayed, skipped, exact)``: samples of the epoch read twice, and never, by the resumed run."""
    if served.epoch != expected.epoch:
        later = served.epoch > expected.epoch
        return (0, expected.stop - expected.start, True) if later else (served.stop - served.start, 0, True)
    a, b = expected.order, served.order
    same = a is None or b is None or (a[:3] == b[:3] and (not a[3] or not b[3] or a[3] == b[3]))
    if same:
        replayed = _overlap((served.start, served.stop), (0, expected.start))
        kept = _overlap((served.start, served.stop), (expected.start, expected.stop))
        return replayed, expected.stop - expected.start - kept, True
    old = epoch_order(a[0], a[1], expected.epoch, a[2])
    new = epoch_order(b[0], b[1], served.epoch, b[2])[served.start : served.stop]
    # the stored order cannot be made again (another algorithm, or a damaged digest)
    if a[3] and TrainPosition.order_digest(a[0], a[1], expected.epoch, a[2]) != a[3]:
        share = expected.start / max(1, a[0])
        return round(len(new) * share), round((expected.stop - expected.start) * share), False
    replayed = int(np.isin(new, old[: expected.start]).sum())
    remaining = old[expected.start : expected.stop]
    return replayed, len(remaining) - int(np.isin(remaining, new).sum()), True


def _causes(
    stored: Mapping[str, Any] | None, resumed: Mapping[str, Any], expected: _Span, served: _Span
) -> list[tuple[str, str]]:
    """``(why, fix)`` for each difference between the checkpoint's run and the resumed one."""
    causes: list[tuple[str, str]] = []
    done, total = int(resumed["batches"]), int(resumed["epoch_batches"])
    if TrainPosition.from_dict(resumed.get("next") or {}) is None and done:
        causes.append(
            (
                f"the train loader ({resumed.get('loader') or 'DataLoader'}) is not resumable: it restarts epoch "
                f"{resumed['epoch']} at its first batch while Lightning counts {done} of its {total} batches done",
                "make the train loader resumable (OrderedDataModule / OrderedLMDataModule do; or return a loader with "
                "state_dict/load_state_dict, e.g. torchdata's StatefulDataLoader, over a seeded sampler), or resume "
                "from a checkpoint saved at the end of an epoch",
            )
        )
    old, new = (stored or {}), (resumed.get("next") or {})
    changed = [k for k in ("seed", "shuffle") if k in old and k in new and old[k] != new[k]]
    if changed:
        what = ", ".join(f"{k} {old[k]} -> {new[k]}" for k in changed)
        causes.append(
            (f"the shuffle changed ({what})", "resume with " + ", ".join(f"{k}={old[k]}" for k in changed))
        )
    elif (
        expected.order
        and served.order
        and expected.order[3]
        and served.order[3]
        and expected.order != served.order
    ):
        causes.append(
            (
                "the epoch's order differs from the checkpoint's with the same seed (another shuffle algorithm)",
                "resume with the library versions the checkpoint was trained with",
            )
        )
    g_old, g_new = old.get("global_batch"), resumed.get("global_batch")
    if g_old and g_new and int(g_old) != int(g_new):
        causes.append(
            (
                f"the global batch changed from {g_old} to {g_new} ({old.get('world_size')} × {old.get('batch_size')} -> "
                f"{resumed.get('world_size')} × {resumed.get('batch_size')}): Lightning counts the epoch in batches",
                f"resume with the checkpoint's global batch of {g_old} (batch_size = {g_old} / the number of ranks), "
                "or from a checkpoint saved at the end of an epoch, where a new global batch starts cleanly",
            )
        )
    elif shorter := _shorter_epoch(old, resumed):  # at the same global batch: limit_train_batches
        causes.append(shorter)
    if served.epoch > expected.epoch:
        causes.append(
            (
                f"Lightning's restored loop counts epoch {expected.epoch} as ended although the checkpoint stopped at "
                f"sample {expected.start} of it, and starts epoch {served.epoch} (a checkpoint saved after fit() "
                "returned mid-epoch, e.g. at max_steps, ends its epoch)",
                "resume from a checkpoint written during the fit (ModelCheckpoint(every_n_train_steps=...)), not one "
                "saved after fit() returned; or accept the skip with OrderValidator(on_violation='warn')",
            )
        )
    if not causes and (served.epoch, served.start) != (expected.epoch, expected.start):
        causes.append(
            (
                f"the train loader continues at sample {served.start} of epoch {served.epoch}, the checkpoint stopped "
                f"at sample {expected.start} of epoch {expected.epoch} (its position was not restored)",
                "resume with the checkpoint's own train loader state (a loader of the same kind)",
            )
        )
    return causes


def _shorter_epoch(old: Mapping[str, Any], resumed: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(why, fix)`` when Lightning's epoch is shorter than the checkpoint's at the same global batch."""
    was, now = old.get("epoch_batches"), resumed.get("epoch_batches")
    if not was or now is None or int(now) >= int(was):
        return None
    whole = int(was) * int(old["global_batch"]) >= int(old.get("epoch_samples") or 1 << 62)
    unset = "leave limit_train_batches unset, as the checkpoint's run did"
    return (
        f"Lightning's epoch is {now} batches long in this run but was {was} in the checkpoint's run "
        f"(Trainer(limit_train_batches=...) or the train loader's length changed): the resumed epoch ends after "
        f"batch {now} and the rest of it is never read",
        f"resume with the checkpoint's epoch of {was} batches ({unset if whole else f'limit_train_batches={was}'}); "
        "change limit_train_batches only when resuming from a checkpoint saved at the end of an epoch",
    )


def check_resume_position(
    stored: Mapping[str, Any] | None, resumed: Mapping[str, Any] | None
) -> list[Violation]:
    """``resume-position``: the resumed run would replay or skip samples of the epoch it resumes in.

    Args:
        stored: where the checkpoint's run stood (:func:`stored_position`): ``epoch``, ``samples``
            (global samples of the epoch consumed), ``global_batch``, and for a position of ours
            ``dataset_size``, ``seed``, ``shuffle``, ``order``, ``epoch_samples``; ``epoch_batches``
            (Lightning's batches per epoch). ``None`` or partial for a checkpoint without one.
        resumed: where the resumed run will read: ``epoch``, ``batches`` (Lightning's batches done
            in it), ``epoch_batches``, ``global_batch``, ``world_size``, ``batch_size``, ``loader``
            (its class name), ``resumable``, ``next`` (the loader's restored position; ``None``
            for a loader without one) and ``restored`` (the loader continues at ``next`` whatever
            Lightning's epoch counter says).

    Returns:
        One violation with the counts (``details["replayed"]``, ``details["skipped"]``) and the
        fix, or nothing (also for a stateful loader of another kind, whose position is its own,
        and when the data changed, which ``resume-data-changed`` reports).
    """
    if not resumed or (resumed.get("resumable") and not resumed.get("next")):
        return []
    old, new = TrainPosition.from_dict(stored or {}), TrainPosition.from_dict(resumed.get("next") or {})
    if old is not None and new is not None and old.dataset_size != new.dataset_size:
        return []
    if resumed.get("epoch_batches") is None:  # an epoch of unknown length: nothing to count against
        return []
    batch = int(resumed.get("global_batch") or 1)
    expected, served = _expected(stored, resumed, batch), _served(resumed, batch)
    if (expected.epoch, expected.start) == (served.epoch, served.start) == (expected.epoch, 0):
        return []  # an epoch starts at its head: nothing of it was consumed, any global batch will do
    replayed, skipped, exact = _counts(expected, served)
    if not replayed and not skipped:
        return []
    causes = _causes(stored, resumed, expected, served)
    unit = "samples" if resumed.get("global_batch") else "batches"
    about = "" if exact else "about "
    counts = [f"replay {about}{replayed} {unit} already trained on" if replayed else ""]
    counts.append(f"skip {about}{skipped} {unit} never seen" if skipped else "")
    return [
        Violation(
            "resume-position",
            ("train",),
            f"resumed in epoch {expected.epoch} at sample {expected.start}, the run would "
            + " and ".join(c for c in counts if c)
            + " in that epoch: "
            + "; ".join(c[0] for c in causes),
            fix="; ".join(c[1] for c in causes),  # empty: the rule's own fix
            details={
                "replayed": replayed,
                "skipped": skipped,
                "exact": exact,
                "epoch": expected.epoch,
                "stored": dict(stored or {}),
                "resumed": {k: v for k, v in resumed.items() if k != "next"}
                | {"next": dict(resumed.get("next") or {})},
            },
        )
    ]
