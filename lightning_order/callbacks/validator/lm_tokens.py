"""What the validator gathers on how documents start and end in an LM run's rows (issue #37).

The sampled train batch :func:`~lightning_order.callbacks.validator.lm.lm_findings` draws (and a
validation sample, only where a BOS id exists) and facts read off the tokenizer in use: its pad
id, the truncation it applies (``tokenizers``' ``Tokenizer.truncation``, or a ``transformers``
tokenizer's backend: still set by the last ``tokenizer(..., truncation=True)`` call), and what its
post-processor adds around a text (a probe encoded through the backend, which leaves the
``transformers`` wrapper's truncation state alone), and the first train rows of a map-style set
joined in index order (a document cut at a context longer than a row is whole only there; a
tokenizer that truncated in ``.map``'s worker processes, or in an earlier run whose result was
cached, leaves no truncation on the one in use). The judgements are pure:
:mod:`~lightning_order.checks.eos_labels` (``eos-label-masked``, ``documents-without-eos``),
:mod:`~lightning_order.checks.bos` (``bos-mismatch``), :mod:`~lightning_order.checks.truncation`
(``documents-truncated``). Gathering only, over duck-typed objects: a tokenizer that tells nothing
leaves its facts unknown, and an unknown fact never raises a violation by itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from lightning_order.callbacks.validator.batches import as_numpy, batch_field, sample_batch
from lightning_order.callbacks.validator.stream_tokens import is_stream, read_split_tokens
from lightning_order.checks.bos import StartCounts, check_bos, count_starts
from lightning_order.checks.eos_labels import (
    check_eos_labels,
    check_rows_end,
    masked_eos_rows,
    unterminated_rows,
)
from lightning_order.checks.label_shift import IGNORE_INDEX
from lightning_order.checks.token_rows import (
    LENGTHS_PADDED_SHARE,
    document_lengths,
    document_starts,
    is_padded,
    joined_windows,
    stream_document_lengths,
)
from lightning_order.checks.truncation import Pile, check_truncation, length_pile
from lightning_order.fingerprints import tokenizer_backend
from lightning_order.rules import Violation

__all__ = [
    "STREAM_LENGTH_TOKENS",
    "TokenEvidence",
    "TokenizerFacts",
    "padding_from_labels",
    "token_evidence",
    "tokenizer_facts",
]

log = logging.getLogger(__name__)

#: What a tokenizer's post-processor is probed with.
_PROBE = "a"
#: Train tokens read in index order to see documents longer than a row whole (a few hundred
#: documents of natural lengths; about 1 000 rows of 32 tokens).
STREAM_LENGTH_TOKENS = 1 << 15


@dataclass(frozen=True)
class TokenizerFacts:
    """What the validator reads off a tokenizer for these checks (``None``: unknown).

    Attributes:
        pad_id: the pad id.
        max_length: the truncation length, ``None`` when it does not truncate.
        template: what the post-processor adds around a text, as ``"<s> $A </s>"``.
        first_id: the first id of an encoded text (BOS when the post-processor adds one).
    """

    pad_id: int | None
    max_length: int | None
    template: str | None
    first_id: int | None

    def adds(self, bos_id: int | None) -> bool | None:
        """Whether an encoded text opens with ``bos_id`` (``None`` when unknown)."""
        if bos_id is None or self.template is None:
            return None
        return self.first_id == bos_id


def _backend(tokenizer: Any) -> Any:
    return tokenizer_backend(tokenizer)


def _pad_id(tokenizer: Any) -> int | None:
    pad = getattr(tokenizer, "pad_token_id", None)
    if isinstance(pad, int):
        return pad
    padding = getattr(_backend(tokenizer), "padding", None)  # a tokenizers.Tokenizer with padding on
    return padding.get("pad_id") if isinstance(padding, dict) else None


def _max_length(tokenizer: Any) -> int | None:
    truncation = getattr(_backend(tokenizer), "truncation", None)
    length = truncation.get("max_length") if isinstance(truncation, dict) else None
    return int(length) if isinstance(length, int) else None


def _probe(tokenizer: Any) -> tuple[str | None, int | None]:
    """``(template, first id)`` of a probe text through the backend's post-processor."""
    encode = getattr(_backend(tokenizer), "encode", None)
    if not callable(encode):
        return None, None
    try:
        encoding = encode(_PROBE)
        tokens, special, ids = encoding.tokens, encoding.special_tokens_mask, encoding.ids
    except Exception as err:  # not a tokenizers backend: what it adds stays unknown
        log.debug("OrderValidator: tokenizer not probed (%s)", err)
        return None, None
    parts: list[str] = []
    for token, is_special in zip(tokens, special):
        part = token if is_special else "$A"
        if not parts or parts[-1] != part or is_special:
            parts.append(part)
    return " ".join(parts), (int(ids[0]) if ids else None)


def tokenizer_facts(tokenizer: Any) -> TokenizerFacts:
    """:class:`TokenizerFacts` of ``tokenizer`` (a ``tokenizers.Tokenizer`` or a ``transformers`` one).

    The truncation is read before the probe, so that nothing the validator encodes changes it.
    """
    max_length = _max_length(tokenizer)
    template, first = _probe(tokenizer)
    return TokenizerFacts(_pad_id(tokenizer), max_length, template, first)


def _arrays(batch: Any) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    ids = as_numpy(batch_field(batch, "input_ids"))
    if ids is None or ids.ndim != 2 or not ids.size:
        return None, None, None
    labels, mask = as_numpy(batch_field(batch, "labels")), as_numpy(batch_field(batch, "attention_mask"))
    labels = labels if labels is not None and labels.shape == ids.shape else None
    if mask is None and labels is not None:
        mask = padding_from_labels(ids, labels)
    return ids, labels, mask


def padding_from_labels(ids: np.ndarray, labels: np.ndarray) -> np.ndarray | None:
    """The attention mask a batch padded in its labels only implies, or ``None`` when it shows none.

    litgpt's SFT collate (#48) pads ``input_ids`` with one id (0, often a real token: the
    end-of-text id) and ``labels`` with ``-100``, and passes no mask: a row's padding is the run of
    ignored labels after its last kept one, when every such run holds that one id. Rows with no
    kept label (a prompt that filled the row) are left whole.
    """
    kept = labels != IGNORE_INDEX
    held = kept.any(axis=1)
    width = ids.shape[1]
    last = np.where(held, width - 1 - np.argmax(kept[:, ::-1], axis=1), width - 1)
    tail = np.arange(width)[None, :] > last[:, None]
    if not tail.any() or np.unique(ids[tail]).size != 1:
        return None  # nothing padded (packed rows), or trailing ignored labels over real tokens
    return (~tail).astype(np.int64)


def _bos_violations(
    dm: Any, ids: np.ndarray, mask: np.ndarray | None, eos_id: int | None, bos_id: int, facts: TokenizerFacts,
    rows: int,
) -> tuple[list[Violation], StartCounts | None]:  # fmt: skip
    train = count_starts(document_starts(ids, mask, eos_id, bos_id), bos_id)
    val_batch, _ = sample_batch(dm, "val_dataloader", rows)
    val_ids, _, val_mask = _arrays(val_batch)
    val = (
        count_starts(document_starts(val_ids, val_mask, eos_id, bos_id), bos_id)
        if val_ids is not None
        else None
    )
    return check_bos(train, val, facts.adds(bos_id), bos_id), val


def _stream_pile(dm: Any, eos_id: int) -> Pile | None:
    """The length pile of the documents the first train rows hold whole, joined in index order.

    A document cut at a context longer than a row (``truncation=True`` at ``model_max_length``, then
    ``group_texts``) is never whole inside one sampled row; the rows that follow it in the dataset
    hold the rest. Only a map-style train set is read (by index, from item 0, its random states put
    back: :func:`~.stream_tokens.read_split_tokens`), and only windows of one width join.
    """
    if is_stream(dm, "train"):  # an iterable's first rows are read by the overlap check, not here
        return None
    read = read_split_tokens(dm, "train", STREAM_LENGTH_TOKENS)
    if read is None or read.rows < 2 or read.tokens.size != read.rows * read.window:
        return None
    stream = joined_windows(read.tokens.reshape(read.rows, read.window))
    if stream is None:
        return None
    return length_pile(
        stream_document_lengths(stream, eos_id), f"the first {read.rows} train rows joined in index order"
    )


@dataclass(frozen=True)
class TokenEvidence:
    """What :func:`token_evidence` found: the violations, and the facts step 1 is judged with.

    Attributes:
        violations: what the sampled rows show: ``eos-label-masked``, ``documents-without-eos``,
            ``bos-mismatch`` and ``documents-truncated``.
        val_starts: the document starts of the sampled validation rows (``None``: not sampled).
        adds_bos: whether the tokenizer opens an encoded text with BOS (``None``: unknown).
        template: what the tokenizer's post-processor adds around a text (``None``: unknown).
        pad_id: the tokenizer's pad id (``None``: unknown).
    """

    violations: list[Violation]
    val_starts: StartCounts | None = None
    adds_bos: bool | None = None
    template: str | None = None
    pad_id: int | None = None


def token_evidence(
    dm: Any, tokenizer: Any, batch: Any, eos_id: int | None, bos_id: int | None, sample_rows: int
) -> TokenEvidence:
    """What the sampled rows show (:class:`TokenEvidence`), with the validation starts and the tokenizer's BOS for step 1's rules."""
    ids, labels, mask = _arrays(batch)
    if ids is None:
        return TokenEvidence([])
    facts = tokenizer_facts(tokenizer)
    found: list[Violation] = []
    val = None
    if eos_id is not None and labels is not None:
        found += check_eos_labels(*masked_eos_rows(ids, labels, mask, eos_id), facts.pad_id, eos_id)
    if eos_id is not None:
        found += check_rows_end(*unterminated_rows(ids, mask, eos_id), eos_id, facts.template or "")
    if bos_id is not None and bos_id != eos_id:
        bos, val = _bos_violations(dm, ids, mask, eos_id, bos_id, facts, sample_rows)
        found += bos
    pile = length_pile(document_lengths(ids, mask, eos_id))
    # Padded one-document rows are truncated to fit the context on purpose (fine-tuning rows).
    padded = is_padded(mask, LENGTHS_PADDED_SHARE)
    if pile is None and not padded and eos_id is not None:
        pile = _stream_pile(dm, eos_id)
    found += check_truncation(
        facts.max_length, pile, f"the tokenizer in use ({type(tokenizer).__name__})", padded=padded
    )
    return TokenEvidence(found, val, facts.adds(bos_id), facts.template, facts.pad_id)
