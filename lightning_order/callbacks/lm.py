"""What the validator gathers on a language-modelling run (the judgement is :func:`~lightning_order.checks.lm.check_lm`).

A datamodule counts as an LM one when it exposes a ``tokenizer`` and either ``eos_token_id``,
a ``block_size`` among its ``dims``, or a ledger with a ``pack`` record. That covers
:class:`~lightning_order.OrderedLMDataModule` and a hand-written datamodule exposing:

- ``tokenizer``: a ``tokenizers.Tokenizer`` or a Hugging Face tokenizer, the object in use;
- ``eos_token_id`` (or the tokenizer's ``<|endoftext|>`` / ``eos_token_id``);
- batches with ``input_ids`` and ``labels`` from ``train_dataloader()``.

Gathering only, over duck-typed objects; what the ledger recorded is read by the pure
:func:`~lightning_order.checks.lm.lm_ledger_evidence`, as on the command line.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from lightning_order.callbacks.batches import as_numpy, batch_field, sample_batch
from lightning_order.callbacks.evidence import datamodule_ledger
from lightning_order.callbacks.model_dims import model_dims
from lightning_order.checks.lm import check_lm, lm_ledger_evidence
from lightning_order.fingerprints import tokenizer_fingerprint
from lightning_order.rules import Violation

__all__ = ["is_lm", "lm_evidence", "lm_violations"]

log = logging.getLogger(__name__)

_EOS = "<|endoftext|>"


def _tokenizer(dm: Any) -> Any:
    try:
        return getattr(dm, "tokenizer", None)
    except Exception as err:  # a datamodule that cannot produce it yet: no LM evidence
        log.debug("OrderValidator: no tokenizer (%s)", err)
        return None


def is_lm(dm: Any) -> bool:
    """Whether ``dm`` looks like an LM datamodule (see the module docstring)."""
    if dm is None:
        return False
    dims = getattr(dm, "dims", None)
    ledger = datamodule_ledger(dm)
    looks_lm = (
        getattr(dm, "eos_token_id", None) is not None
        or (isinstance(dims, Mapping) and "block_size" in dims)
        or (ledger is not None and ledger.latest("pack") is not None)
    )
    return looks_lm and _tokenizer(dm) is not None


def _tokenizer_facts(tokenizer: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if hasattr(tokenizer, "get_vocab_size"):
        facts["tokenizer_size"] = int(tokenizer.get_vocab_size(with_added_tokens=True))
    elif hasattr(tokenizer, "__len__"):
        facts["tokenizer_size"] = len(tokenizer)
    if hasattr(backend, "to_str"):
        facts["tokenizer_fp"] = tokenizer_fingerprint(tokenizer)
    return facts


def _eos_id(dm: Any, tokenizer: Any, info: Mapping[str, Any]) -> int | None:
    for value in (info.get("eos_id"), getattr(dm, "eos_token_id", None)):
        if isinstance(value, int):
            return value
    lookup = getattr(tokenizer, "token_to_id", None)
    found = lookup(_EOS) if callable(lookup) else getattr(tokenizer, "eos_token_id", None)
    return int(found) if isinstance(found, int) else None


def _model_facts(module: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    embed = getattr(module, "get_input_embeddings", None)
    head = getattr(module, "get_output_embeddings", None)
    weight = getattr(embed(), "weight", None) if callable(embed) else None
    facts["embedding_rows"] = (
        int(weight.shape[0]) if weight is not None else model_dims(module).get("embedding_rows")
    )
    head_weight = getattr(head(), "weight", None) if callable(head) else None
    if head_weight is not None:
        facts["head_rows"] = int(head_weight.shape[0])
    return {k: v for k, v in facts.items() if v is not None}


def _sample_facts(dm: Any, rows: int, eos_id: int | None) -> dict[str, Any]:
    batch, _ = sample_batch(dm, "train_dataloader", rows)
    ids, labels = as_numpy(batch_field(batch, "input_ids")), as_numpy(batch_field(batch, "labels"))
    if ids is None or ids.ndim != 2 or not ids.size:
        return {}
    facts: dict[str, Any] = {"max_token_id": int(ids.max())}
    # The whole block: the inputs and the one token that only the labels hold.
    tail = (
        labels[:, -1:]
        if labels is not None and labels.ndim == 2 and labels.shape[0] == ids.shape[0]
        else None
    )
    if tail is not None:
        facts["max_token_id"] = max(facts["max_token_id"], int(labels.max()))
    if eos_id is not None:
        eos = int(np.count_nonzero(ids == eos_id))
        eos += int(np.count_nonzero(tail == eos_id)) if tail is not None else 0
        facts["eos_id"] = eos_id
        facts["sampled_eos"] = eos
        facts["sampled_tokens"] = int(ids.size + (tail.size if tail is not None else 0))
    return facts


def lm_evidence(dm: Any, module: Any, sample_rows: int) -> dict[str, Any]:
    """Everything :func:`~lightning_order.checks.lm.check_lm` reads, from ``dm``, its ledger, ``module`` and batches."""
    tokenizer = _tokenizer(dm)
    ledger = datamodule_ledger(dm)
    info = ledger.info if ledger is not None else {}
    recorded = lm_ledger_evidence(ledger) if ledger is not None else {}
    evidence = {**_tokenizer_facts(tokenizer), **recorded, **_model_facts(module)}
    evidence.update(_sample_facts(dm, sample_rows, _eos_id(dm, tokenizer, info)))
    return evidence


def lm_violations(dm: Any, module: Any, sample_rows: int) -> list[Violation]:
    """The LM checks of an LM run (nothing for another datamodule)."""
    if not is_lm(dm):
        return []
    return check_lm(lm_evidence(dm, module, sample_rows))
