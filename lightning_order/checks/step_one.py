"""What step 1 trained on, judged: the label and token rules read off the first training step itself.

The validator's observer (:mod:`lightning_order.callbacks.validator.step_one`) records, during the
first training step and before its optimizer step, the ids that entered the model's token
embedding, the targets of every cross-entropy the step computed, and the positions and masks the
model was called with. What it saw is proof, whoever wrote the loop: which offset the targets
have against the ids, rows that keep no target, end-of-text targets left out of the loss, BOS at
document starts, ids beyond the embedding, documents packed into one row whose positions never
restart. Nothing here guesses from a module's class or a batch key's name; a fact the step did not
show (no loss seen, too few rows) is left undecided, and the sampled batches then only warn.

Pure functions of plain data (:class:`StepOne`, :class:`TokenFacts`) to :class:`Verdict`; the
arrays are the small slices the observer copied (at most a few rows of a few thousand tokens).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from lightning_order.checks.bos import MIN_STARTS, StartCounts, check_bos, count_starts
from lightning_order.checks.label_shift import IGNORE_INDEX
from lightning_order.checks.token_rows import attended, document_starts, is_padded
from lightning_order.rules import Violation

__all__ = [
    "MIN_TARGETS",
    "OFFSET_SHARE",
    "LossSeen",
    "StepOne",
    "TokenFacts",
    "Verdict",
    "judge_step_one",
    "separated_boundaries",
    "target_offset",
]

#: The share of kept targets equal to the ids at one offset from which that offset is the step's
#: (natural text rarely repeats a token, so a wrong offset matches a few percent at most).
OFFSET_SHARE = 0.9
#: Kept targets a loss must hold before its offset is read.
MIN_TARGETS = 8
#: Offsets looked for: 0 (labels equal to the inputs, unshifted), 1 (next token), 2 (shifted twice).
_OFFSETS = (0, 1, 2)
#: The share of rows that can show it from which the end of text is judged missing from the loss / rows.
_END_SHARE = 0.9
#: Rows that must show it before an end-of-text rule is judged from the step.
_MIN_END_ROWS = 2


@dataclass(frozen=True)
class LossSeen:
    """One loss computed during step 1.

    Attributes:
        targets: its targets as ``rows × width`` (the first rows and positions of the batch, in the
            layout of :attr:`StepOne.ids`).
        ignore_index: the target value left out of the loss.
        rows: the batch's rows.
        empty_rows: rows of the whole batch whose every target is ``ignore_index``.
        source: what computed it, for messages (``"cross_entropy"``, ``"LlamaForCausalLM(labels=...)"``).
    """

    targets: np.ndarray
    ignore_index: int = IGNORE_INDEX
    rows: int = 0
    empty_rows: int = 0
    source: str = "cross_entropy"


@dataclass(frozen=True)
class StepOne:
    """What the model received and was trained against in step 1 (``None``: not seen).

    Attributes:
        ids: the ids that entered the token embedding, ``rows × width`` (the first ones).
        max_id: the largest id that entered it, over the whole batch.
        embedding_rows: the rows of that embedding.
        losses: the losses computed.
        position_ids: the ``position_ids`` the model was called with, in the layout of ``ids``.
        attention_mask: the ``attention_mask`` it was called with, in the layout of ``ids``.
        cu_seq_lens: it was called with ``cu_seq_lens_q`` (documents kept apart by the kernel).
        labels_to_model: it was called with ``labels=`` (a ``transformers`` causal LM shifts them itself).
        model: the called model's class name, for messages.
        call_seen: a ``transformers`` model's call was seen (its keyword arguments, positions
            included, are known; a hand-written model reads positions where the observer cannot see).
    """

    ids: np.ndarray | None = None
    max_id: int | None = None
    embedding_rows: int | None = None
    losses: tuple[LossSeen, ...] = ()
    position_ids: np.ndarray | None = None
    attention_mask: np.ndarray | None = None
    cu_seq_lens: bool = False
    labels_to_model: bool = False
    model: str = "the model"
    call_seen: bool = False


@dataclass(frozen=True)
class TokenFacts:
    """What the tokenizer and the data's records say, for the step-1 rules (``None``: unknown).

    Attributes:
        eos_id: the end-of-text id.
        end_ids: ids that end a document or a turn (end-of-text, ``<|im_end|>``, ``<|eot_id|>``, ...).
        bos_id: the start-of-document id.
        separate_documents: the data's records say documents are kept apart (``document_attention``).
        val_starts: the document starts of the sampled validation rows (for ``bos-mismatch``).
        adds_bos: whether the tokenizer opens an encoded text with BOS.
        template: what the tokenizer's post-processor adds around a text (``"<s> $A"``), for messages.
        pad_id: the tokenizer's pad id, for messages.
    """

    eos_id: int | None = None
    end_ids: tuple[int, ...] = ()
    bos_id: int | None = None
    separate_documents: bool = False
    val_starts: StartCounts | None = None
    adds_bos: bool | None = None
    template: str | None = None
    pad_id: int | None = None


@dataclass(frozen=True)
class Verdict:
    """The step-1 judgement.

    Attributes:
        violations: what the step proves wrong.
        decided: the rule codes the step gave evidence on (wrong or right): sampled guesses on
            them are dropped, the others are only warned.
    """

    violations: list[Violation]
    decided: frozenset[str]


def _aligned(ids: np.ndarray, targets: np.ndarray, offset: int) -> tuple[np.ndarray, np.ndarray] | None:
    rows = min(ids.shape[0], targets.shape[0])
    width = min(targets.shape[1], ids.shape[1] - offset)
    if rows <= 0 or width <= 0:
        return None
    return ids[:rows, offset : offset + width], targets[:rows, :width]


def target_offset(ids: np.ndarray, targets: np.ndarray, ignore_index: int = IGNORE_INDEX) -> int | None:
    """The offset ``k`` with ``targets[:, t] == ids[:, t + k]`` on :data:`OFFSET_SHARE` of the kept targets.

    ``None`` when no offset (or more than one: rows of one repeated token) reaches it, or no target is
    kept: the targets are not the ids (a classifier, distillation). Fewer than :data:`MIN_TARGETS`
    kept targets give an offset only when every one of them fits it.
    """
    if ids.ndim != 2 or targets.ndim != 2:
        return None
    found = []
    for offset in _OFFSETS:
        pair = _aligned(ids, targets, offset)
        if pair is None:
            continue
        shifted, kept_targets = pair
        kept = kept_targets != ignore_index
        if not kept.any():
            continue
        share = float((shifted[kept] == kept_targets[kept]).mean())
        # Fewer than MIN_TARGETS kept (rows whose prompt filled them, #48): only if every one fits.
        if share >= (OFFSET_SHARE if int(kept.sum()) >= MIN_TARGETS else 1.0):
            found.append(offset)
    return found[0] if len(found) == 1 else None


def _shift_violation(step: StepOne, loss: LossSeen, offset: int) -> Violation:
    ids = step.ids if step.ids is not None else np.zeros((0, 0), dtype=np.int64)
    pair = _aligned(ids, loss.targets, offset)
    kept = int((pair[1] != loss.ignore_index).sum()) if pair is not None else 0
    seen = (
        f"in step 1, the targets of {loss.source} are input_ids[t + {offset}] at position t "
        f"({kept} kept targets of the first {loss.targets.shape[0]} rows)"
    )
    details = {"offset": offset, "kept_targets": kept, "source": loss.source, "model": step.model}
    if offset == 2:
        why = (
            f"{step.model} got labels= and shifts labels inside its loss, and they were already shifted by one"
            if step.labels_to_model
            else "the labels were shifted by one twice"
        )
        return Violation(
            "labels-shifted-twice",
            ("train", "shard"),
            f"{seen}: {why}; the model learns the token after next",
            details=details,
        )
    return Violation(
        "labels-not-shifted",
        ("train", "shard"),
        f"{seen}: the logits at position t are trained to predict the token they were given; "
        "the model learns to copy its input",
        details=details,
    )


def _empty_rows_violation(losses: tuple[LossSeen, ...]) -> list[Violation]:
    worst = max(losses, key=lambda loss: loss.empty_rows)
    if not worst.empty_rows:
        return []
    return [
        Violation(
            "rows-without-target",
            ("train", "encode"),
            f"in step 1, {worst.empty_rows} of {worst.rows} rows reached {worst.source} with every target "
            f"{worst.ignore_index}: nothing in them is trained (a completion-only collator whose response "
            "template never matched, or prompts longer than max_length, so the answer was cut away)",
            details={"empty_rows": worst.empty_rows, "rows": worst.rows, "source": worst.source},
        )
    ]


def _predicted(ids: np.ndarray, kept: np.ndarray, offset: int, where: np.ndarray) -> np.ndarray:
    """Per position of ``ids`` where ``where`` holds: 1 when the target predicting its token is kept, 0 when
    ignored, -1 elsewhere (not asked, or not predicted inside the slice)."""
    out = np.full(ids.shape, -1, dtype=np.int8)
    width = min(kept.shape[1], ids.shape[1] - offset)
    rows = min(ids.shape[0], kept.shape[0])
    if width <= 0:
        return out
    out[:rows, offset : offset + width] = kept[:rows, :width]
    return np.where(where, out, -1)


def _eos_masked(
    step: StepOne, loss: LossSeen, offset: int, eos_id: int, pad_id: int | None
) -> list[Violation]:
    ids = step.ids
    if ids is None:
        return []
    eos = (ids == eos_id) & attended(ids, step.attention_mask)
    kept = _predicted(ids, loss.targets != loss.ignore_index, offset, eos)
    rows = (kept >= 0).any(axis=1)
    masked = rows & ~(kept == 1).any(axis=1)
    if int(rows.sum()) < _MIN_END_ROWS or int(masked.sum()) < _END_SHARE * int(rows.sum()):
        return []
    return [
        Violation(
            "eos-label-masked",
            ("train", "encode"),
            f"in step 1, {int(masked.sum())} of {int(rows.sum())} rows holding the end-of-text id ({eos_id}) "
            f"left every one of them out of {loss.source}'s targets: the model never learns to stop"
            + (
                " (the pad id is the end-of-text id: the collator masked every pad label, and with them every end)"
                if pad_id == eos_id
                else ""
            ),
            details={"rows": int(rows.sum()), "masked": int(masked.sum()), "eos_id": eos_id},
        )
    ]


def _unterminated(
    step: StepOne, loss: LossSeen, end_ids: tuple[int, ...], template_of: str | None = None
) -> tuple[list[Violation], bool]:
    """``documents-without-eos`` from the padded rows' kept targets, and whether enough rows showed it."""
    mask = step.attention_mask
    if mask is None or step.ids is None or mask.shape != step.ids.shape or not is_padded(mask):
        return [], False
    rows = min(mask.shape[0], loss.targets.shape[0])
    padded = (mask[:rows] == 0).any(axis=1)
    targets = loss.targets[:rows]
    kept = targets != loss.ignore_index
    # Rows that hold padding were not cut to the width: their end is inside the slice. A row holding
    # an end id whose target is ignored is eos-label-masked's, not a row without an end.
    shown = padded & kept.any(axis=1)
    ids = step.ids[:rows]
    held = (np.isin(ids, np.asarray(end_ids)) & attended(ids, mask[:rows])).any(axis=1)
    ends = (np.isin(targets, np.asarray(end_ids)) & kept).any(axis=1) | held
    count, without = int(shown.sum()), int((shown & ~ends).sum())
    if count < _MIN_END_ROWS:
        return [], False
    if without < _END_SHARE * count:
        return [], True
    template = f" (the tokenizer adds none: its post-processor: {template_of!r})" if template_of else ""
    return [
        Violation(
            "documents-without-eos",
            ("encode", "train"),
            f"in step 1, {without} of {count} padded rows hold no end-of-text id (ids {list(end_ids)}) and "
            f"train none: the model never learns to stop{template}; end every row with it ('<s> $A </s>', "
            "add_eos_token=True, or append eos_token_id before padding) and keep its label",
            details={"rows": count, "unterminated": without, "end_ids": list(end_ids)},
        )
    ], True


def separated_boundaries(
    ids: np.ndarray,
    targets: np.ndarray | None,
    ignore_index: int,
    offset: int,
    eos_id: int | None,
    attention_mask: np.ndarray | None = None,
) -> list[tuple[int, int]]:
    """``(row, t)``: where a document starts inside a row that the targets keep apart from the one before.

    A start is an attended position whose target alone is ignored between kept ones
    (``DataCollatorWithFlattening``'s ``-100`` at each sequence's first label: the previous
    document's last token is not trained to predict it). Packing that trains across boundaries
    (``group_texts``) keeps that target, completion-only rows ignore whole prompts, and a lone
    ignored target on an end-of-text id is that id masked (``eos-label-masked``): no start there.
    """
    if targets is None or ids.ndim != 2:
        return []
    rows = min(ids.shape[0], targets.shape[0])
    width = min(ids.shape[1], targets.shape[1] + offset)
    mask = attended(ids, attention_mask)
    found = []
    for row in range(rows):
        # kept[t]: the target that predicts ids[row, t] is kept (None: not in the slice).
        predicts = {t: targets[row, t - offset] != ignore_index for t in range(offset, width)}
        for t in range(max(1, offset), width):
            if predicts.get(t, True) or not (mask[row, t] and mask[row, t - 1]):
                continue
            if predicts.get(t - 1, False) and predicts.get(t + 1, False) and ids[row, t] != eos_id:
                found.append((row, t))
    return found


def _positions(
    step: StepOne, facts: TokenFacts, loss: LossSeen | None, offset: int | None
) -> list[Violation]:
    ids = step.ids
    if ids is None or step.cu_seq_lens or not step.call_seen:
        return []
    if loss is not None and offset == 1:
        starts = separated_boundaries(
            ids, loss.targets, loss.ignore_index, offset, facts.eos_id, step.attention_mask
        )
    else:
        starts = []
    if facts.separate_documents and facts.eos_id is not None:
        mask = attended(ids, step.attention_mask)
        after = np.zeros(ids.shape, dtype=bool)
        after[:, 1:] = (ids[:, :-1] == facts.eos_id) & mask[:, 1:]
        starts += [(int(r), int(t)) for r, t in zip(*np.nonzero(after))]
    if not starts:
        return []
    positions = step.position_ids
    if positions is not None and positions.shape[0] == 1 and ids.shape[0] > 1:
        positions = np.broadcast_to(positions, ids.shape)
    rows = sorted({r for r, _ in starts})
    if positions is None or positions.shape != ids.shape:
        what = "no position_ids"
        bad = rows
    else:
        bad = sorted({r for r, t in starts if positions[r, t] > positions[r, t - 1]})
        what = "position_ids that do not restart at document starts"
    if not bad:
        return []
    return [
        Violation(
            "attention-crosses-documents",
            ("train", "shard"),
            f"in step 1, {len(bad)} of {ids.shape[0]} rows hold several documents kept apart by their labels "
            f"({len(starts)} document starts), and {step.model} was called with {what}: every document "
            "attends to the ones packed before it; pass position_ids that restart at 0 at every document "
            "(DataCollatorWithFlattening(return_position_ids=True)) to a model that honours them",
            details={"rows": len(bad), "starts": len(starts), "model": step.model, "positions": what},
        )
    ]


def _bos(step: StepOne, facts: TokenFacts) -> tuple[list[Violation], bool]:
    if step.ids is None or facts.bos_id is None or facts.bos_id == facts.eos_id:
        return [], False
    train = count_starts(
        document_starts(step.ids, step.attention_mask, facts.eos_id, facts.bos_id), facts.bos_id
    )
    if train.starts < MIN_STARTS:
        return [], False
    found = check_bos(train, facts.val_starts, facts.adds_bos, facts.bos_id)
    return [_observed(v, "in step 1's rows", {"train_observed": asdict(train)}) for v in found], True


def _observed(violation: Violation, where: str, extra: dict[str, object]) -> Violation:
    return Violation(
        violation.rule,
        violation.steps,
        f"{where}: {violation.message}",
        details={**violation.details, **extra},
    )


def _overflow(step: StepOne) -> list[Violation]:
    if step.max_id is None or step.embedding_rows is None or step.max_id < step.embedding_rows:
        return []
    return [
        Violation(
            "vocab-changed-after-init",
            ("init_model", "encode"),
            f"in step 1, token id {step.max_id} entered {step.model}'s token embedding of {step.embedding_rows} "
            "rows: the data was encoded with a larger tokenizer than the model was built for",
            details={"max_token_id": step.max_id, "rows": step.embedding_rows},
        )
    ]


def judge_step_one(step: StepOne, facts: TokenFacts) -> Verdict:
    """The violations step 1 proves, and the rules it decided (see :class:`Verdict`).

    Args:
        step: what the observer recorded.
        facts: what the tokenizer and the records say.
    """
    found: list[Violation] = list(_overflow(step))
    decided: set[str] = set()
    if step.ids is not None and step.call_seen:
        decided.add("attention-crosses-documents")
    language = None  # the first loss whose targets are the ids at a known offset
    for loss in step.losses:
        offset = target_offset(step.ids, loss.targets, loss.ignore_index) if step.ids is not None else None
        if offset is not None and language is None:
            language = (loss, offset)
    if step.losses:
        decided.add("rows-without-target")
        # Rows without a target count in the loss whose targets are the ids (an auxiliary masked-LM loss
        # may leave a short row unmasked), or where no row keeps one: a loss of nothing, NaN.
        judged = [language[0]] if language is not None else [s for s in step.losses if s.empty_rows == s.rows]
        found += _empty_rows_violation(tuple(judged)) if judged else []
    if language is not None:
        loss, offset = language
        decided |= {"labels-shifted-twice", "labels-not-shifted"}
        if offset != 1:
            found.append(_shift_violation(step, loss, offset))
        if facts.eos_id is not None:
            decided.add("eos-label-masked")
            found += _eos_masked(step, loss, offset, facts.eos_id, facts.pad_id)
        ends = tuple(
            dict.fromkeys([*(facts.end_ids or ()), *([facts.eos_id] if facts.eos_id is not None else [])])
        )
        if ends:
            unterminated, shown = _unterminated(step, loss, ends, facts.template)
            found += unterminated
            if shown:
                decided.add("documents-without-eos")
    loss_seen, offset_seen = language if language is not None else (None, None)
    found += _positions(step, facts, loss_seen, offset_seen)
    bos, bos_shown = _bos(step, facts)
    found += bos
    if bos_shown:
        decided.add("bos-mismatch")
    return Verdict(found, frozenset(decided))
