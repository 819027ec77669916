"""What the validator gathers to see a tokenizer trained before cleaning, with no record (zero glue).

The judgement is :func:`~lightning_order.checks.tokenizer_fit.check_tokenizer_fit`; this module
reads its evidence off the datamodule's ``tokenizer`` (a ``tokenizers.Tokenizer`` or a
``transformers`` fast tokenizer: its vocabulary, each entry decoded, its special tokens left out)
and off the sampled train batch (the ids of its ``input_ids`` and of its labels' last column, the
one token only the labels hold). Gathering only, over duck-typed objects: a tokenizer it cannot
read, or a batch without integer token ids, gives no evidence and no violation.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from lightning_order.callbacks.validator.batches import as_numpy, batch_field, sample_batch
from lightning_order.checks.tokenizer_fit import check_tokenizer_fit, tokenizer_fit_evidence
from lightning_order.fingerprints import tokenizer_backend
from lightning_order.rules import Violation

__all__ = ["sampled_token_ids", "tokenizer_fit_violations", "tokenizer_vocabulary"]

log = logging.getLogger(__name__)


def tokenizer_vocabulary(tokenizer: Any) -> tuple[dict[int, str], set[int]] | None:
    """Every id of ``tokenizer`` with its decoded text, and the ids of its special/added tokens.

    ``None`` for an object that is not a ``tokenizers.Tokenizer`` and holds none
    (``backend_tokenizer`` of a ``transformers`` fast tokenizer, ``processor`` of litgpt's).
    """
    backend = tokenizer_backend(tokenizer)
    needed = ("get_vocab", "decode_batch", "get_added_tokens_decoder")
    if not all(callable(getattr(backend, name, None)) for name in needed):
        return None
    ids = sorted({int(i) for i in backend.get_vocab(with_added_tokens=True).values()})
    texts = backend.decode_batch([[i] for i in ids], skip_special_tokens=False)
    special = {int(i) for i in backend.get_added_tokens_decoder()}
    return dict(zip(ids, texts)), special


def sampled_token_ids(batch: Any) -> np.ndarray | None:
    """The token ids a sampled train batch holds (its inputs and its labels' last column), or ``None``."""
    ids = as_numpy(batch_field(batch, "input_ids"))
    if ids is None or ids.ndim != 2 or not ids.size or not np.issubdtype(ids.dtype, np.integer):
        return None
    labels = as_numpy(batch_field(batch, "labels"))
    if labels is not None and labels.ndim == 2 and labels.shape[0] == ids.shape[0]:
        ids = np.concatenate([ids, labels[:, -1:].astype(ids.dtype)], axis=1)
    return ids[ids >= 0]  # -100 (and other negative) labels are no token


def tokenizer_fit_violations(dm: Any, module: Any, batch: Any, sample_rows: int) -> list[Violation]:
    """``vocab-before-clean`` from ``dm.tokenizer`` and a sampled train batch (nothing for a non-LM run).

    Args:
        dm: the datamodule (its ``tokenizer`` is read).
        module: the LightningModule; unused today, the signature the LM gatherers share.
        batch: the sampled train batch, or ``None`` to draw ``sample_rows`` rows here.
        sample_rows: train rows to draw when ``batch`` is ``None``.
    """
    try:
        tokenizer = getattr(dm, "tokenizer", None) if dm is not None else None
    except Exception as err:  # a datamodule that cannot produce it yet: no evidence
        log.debug("OrderValidator: no tokenizer (%s)", err)
        return []
    vocabulary = tokenizer_vocabulary(tokenizer) if tokenizer is not None else None
    if vocabulary is None:
        return []
    if batch is None:
        batch, _ = sample_batch(dm, "train_dataloader", sample_rows)
    ids = sampled_token_ids(batch) if batch is not None else None
    if ids is None or not ids.size:
        return []
    vocab, special = vocabulary
    evidence = tokenizer_fit_evidence(vocab, np.unique(ids).tolist(), special, int(ids.size))
    return check_tokenizer_fit(evidence)
