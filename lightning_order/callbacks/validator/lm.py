"""What the validator gathers on a language-modelling run (the judgement is :func:`~lightning_order.checks.lm.check_lm`).

A datamodule counts as an LM one when it exposes a ``tokenizer`` and its pipeline's spec (its
class's, or the one its ledger names) has ``token_checks``; a datamodule of no registered pipeline
when it has ``eos_token_id``, the dims of such a spec, or, with no glue at all,
a ``tokenizers.Tokenizer`` or ``transformers`` tokenizer and train batches that are next-token
pairs (labels the inputs shifted by one, or equal to them when the model shifts). That covers
:class:`~lightning_order.OrderedLMDataModule` and a hand-written (nanoGPT-style) datamodule:

- ``tokenizer``: the object in use; its size counts added tokens, its end-of-text id is its
  ``eos_token_id`` or a declared end-of-text special token (``<|endoftext|>``, ``</s>``, ...),
  its start-of-document id its ``bos_token_id`` or a declared ``<s>``, ``<|begin_of_text|>``, ...
  (blocks packed BOS-first, with no end-of-text, hold their boundaries there);
- ``eos_token_id`` on the datamodule, when set, wins;
- batches as dicts (``input_ids``, ``labels``) or tuples (``(x, y)``) from ``train_dataloader()``.

The model's rows come from ``get_input_embeddings()`` / ``get_output_embeddings()`` of the
module or of its first submodule that has them (a ``transformers`` model inside a
LightningModule), else from its embedding modules. Gathering only, over duck-typed objects; what
the ledger recorded is read by the pure :func:`~lightning_order.checks.lm.lm_ledger_evidence`,
as on the command line.

:func:`lm_findings` splits what is found by evidence (issue #43): the label and document-end/start
rules read off the sampled batch are guesses (:func:`sampled_only`) that step 1 decides
(:mod:`~lightning_order.callbacks.validator.step_one`) or that are only warned; the rest is proof.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from lightning_order.callbacks.validator.batches import as_numpy, batch_field, sample_batch
from lightning_order.callbacks.validator.documents import document_attention_on, document_violations
from lightning_order.callbacks.validator.evidence import datamodule_ledger, model_dims, spec_of
from lightning_order.callbacks.validator.lm_tokens import token_evidence
from lightning_order.callbacks.validator.tokenizer_fit import tokenizer_fit_violations
from lightning_order.checks.label_shift import (
    IGNORE_INDEX,
    check_label_shift,
    check_unshifted_labels,
    preshifted_rows,
    unshifted_rows,
)
from lightning_order.checks.lm import check_lm, eos_evidence, lm_ledger_evidence
from lightning_order.checks.registry import CheckEvidence, EvidenceKind, Phase, register_check
from lightning_order.checks.step_one import TokenFacts
from lightning_order.fingerprints import is_tokenizer, tokenizer_backend, tokenizer_fingerprint
from lightning_order.models.hf import hf_causal_lm
from lightning_order.pipelines import PIPELINES, spec_of_class
from lightning_order.rules import Violation

__all__ = [
    "LMFindings",
    "end_ids",
    "is_hf_model",
    "is_lm",
    "judges_labels",
    "label_shift_violations",
    "lm_evidence",
    "lm_findings",
    "sampled_only",
    "tokenizer_in_use",
]

log = logging.getLogger(__name__)

#: End-of-text tokens a tokenizer may declare, in the order they are looked for.
_EOS_NAMES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "[EOS]")
#: Start-of-document tokens (Llama's ``add_bos_token``: every document opens with one, none ends with
#: end-of-text): with no recorded rate, a block holding one holds a document boundary too.
_BOS_NAMES = ("<s>", "<|begin_of_text|>", "<|startoftext|>", "<bos>", "[BOS]")
#: Tokens that end a turn of a chat template: a row trained on one of them learns to stop there.
_END_OF_TURN_NAMES = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|end_of_turn|>")
#: Rules whose evidence in :func:`lm_findings` is sampled rows only: step 1 decides them (see
#: :func:`lm_findings`); a sample may only warn.
_SAMPLED_RULES = frozenset(
    {
        "labels-shifted-twice",
        "labels-not-shifted",
        "eos-label-masked",
        "documents-without-eos",
        "bos-mismatch",
    }
)
#: ``label_shift_violations(batch=...)`` left out: the caller drew none (a drawn batch may be ``None``).
_UNDRAWN: Any = object()


def _tokenizer(dm: Any) -> Any:
    try:
        return getattr(dm, "tokenizer", None)
    except Exception as err:  # a datamodule that cannot produce it yet: no LM evidence
        log.debug("OrderValidator: no tokenizer (%s)", err)
        return None


def tokenizer_in_use(dm: Any) -> str | None:
    """The fingerprint of ``dm.tokenizer`` when it is a tokenizer the validator reads, else ``None``."""
    tokenizer = _tokenizer(dm) if dm is not None else None
    return tokenizer_fingerprint(tokenizer) if tokenizer is not None and is_tokenizer(tokenizer) else None


def _same_where_kept(ids: np.ndarray, labels: np.ndarray) -> bool:
    kept = labels != IGNORE_INDEX  # transformers masks padding out of the loss with -100
    return bool(kept.any() and np.array_equal(ids[kept], labels[kept]))


def _next_token_pairs(batch: Any) -> bool:
    """Whether a batch's labels are its inputs shifted by one (or equal to them: the model shifts),
    positions masked with ``-100`` left out."""
    ids, labels = as_numpy(batch_field(batch, "input_ids")), as_numpy(batch_field(batch, "labels"))
    if ids is None or labels is None or ids.ndim != 2 or ids.shape != labels.shape or ids.shape[1] < 2:
        return False
    return _same_where_kept(ids, labels) or _same_where_kept(ids[:, 1:], labels[:, :-1])


def is_lm(dm: Any, batch: Any = None) -> bool:
    """Whether the LM checks apply to ``dm``: its pipeline's spec says so (``token_checks``); for a
    datamodule of no registered pipeline (zero glue), what it exposes (see the module docstring).

    Args:
        dm: the datamodule.
        batch: a sampled train batch, for the zero-glue case.
    """
    tokenizer = _tokenizer(dm) if dm is not None else None
    if tokenizer is None:
        return False  # nothing to check token ids against
    spec = spec_of(dm, datamodule_ledger(dm))
    if spec is not None and (spec.token_checks or spec_of_class(type(dm)) is spec):
        return spec.token_checks  # a registered pipeline's DataModule, or a ledger of a token pipeline
    # A hand-written datamodule recording under the default pipeline's names may still hold an LM's data.
    dims = getattr(dm, "dims", None)
    looks_lm = getattr(dm, "eos_token_id", None) is not None or (
        isinstance(dims, Mapping)
        and any(s.token_checks and set(s.dims) <= set(dims) for s in PIPELINES.values())
    )
    return looks_lm or (is_tokenizer(tokenizer) and batch is not None and _next_token_pairs(batch))


def _tokenizer_facts(tokenizer: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    backend = tokenizer_backend(tokenizer) if not hasattr(tokenizer, "__len__") else tokenizer
    if hasattr(backend, "get_vocab_size"):  # a tokenizers.Tokenizer, or one in a wrapper (litgpt's)
        facts["tokenizer_size"] = int(backend.get_vocab_size(with_added_tokens=True))
    elif hasattr(tokenizer, "__len__"):
        facts["tokenizer_size"] = len(tokenizer)  # transformers: added tokens included
    if is_tokenizer(tokenizer):
        facts["tokenizer_fp"] = tokenizer_fingerprint(tokenizer)
    return facts


def _declared_ids(tokenizer: Any, names: tuple[str, ...]) -> list[int]:
    """The ids of those of ``names`` the tokenizer declares as special tokens, in the order of ``names``."""
    backend = tokenizer_backend(tokenizer)
    added = getattr(backend, "get_added_tokens_decoder", None)
    special = {t.content: int(i) for i, t in added().items() if t.special} if callable(added) else {}
    lookup = getattr(backend, "token_to_id", None)
    found: list[int] = []
    for name in names:
        if name in special:
            found.append(special[name])
            continue
        value = lookup(name) if callable(lookup) and not callable(added) else None
        if isinstance(value, int):
            found.append(value)
    return found


def _declared(tokenizer: Any, names: tuple[str, ...]) -> int | None:
    """The id of the first of ``names`` the tokenizer declares as a special token."""
    found = _declared_ids(tokenizer, names)
    return found[0] if found else None


def _eos_id(dm: Any, tokenizer: Any, info: Mapping[str, Any]) -> int | None:
    for value in (
        info.get("eos_id"),
        getattr(dm, "eos_token_id", None),
        getattr(tokenizer, "eos_token_id", None),
        getattr(tokenizer, "eos_id", None),  # litgpt's Tokenizer
    ):
        if isinstance(value, int):
            return value
    return _declared(tokenizer, _EOS_NAMES)


def _bos_id(dm: Any, tokenizer: Any) -> int | None:
    for value in (
        getattr(dm, "bos_token_id", None),
        getattr(tokenizer, "bos_token_id", None),
        getattr(tokenizer, "bos_id", None),  # litgpt's Tokenizer
    ):
        if isinstance(value, int):
            return value
    return _declared(tokenizer, _BOS_NAMES)


def _with(module: Any, method: str) -> Any:
    """``module``'s ``method``, or that of its first submodule that has it (a model in a wrapper)."""
    if callable(getattr(module, method, None)):
        return getattr(module, method)
    for sub in module.modules() if callable(getattr(module, "modules", None)) else ():
        if callable(getattr(sub, method, None)):
            return getattr(sub, method)
    return None


def is_hf_model(module: Any) -> bool:
    """Whether ``module`` is or holds a ``transformers`` model (one with ``resize_token_embeddings``)."""
    return _with(module, "resize_token_embeddings") is not None


def _rows(method: Any) -> int | None:
    try:
        weight = getattr(method(), "weight", None) if method is not None else None
    except (NotImplementedError, AttributeError):  # a model without one
        return None
    return int(weight.shape[0]) if weight is not None else None


def _model_facts(module: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "embedding_rows": _rows(_with(module, "get_input_embeddings")),
        "head_rows": _rows(_with(module, "get_output_embeddings")),
        "hf_model": is_hf_model(module) or None,
    }
    if facts["embedding_rows"] is None:
        facts["embedding_rows"] = model_dims(module).get("embedding_rows")
    return {k: v for k, v in facts.items() if v is not None}


def _sample_facts(batch: Any, eos_id: int | None, bos_id: int | None = None) -> dict[str, Any]:
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
        block = ids if tail is None else np.concatenate([ids, tail], axis=1)
        hits = block == eos_id
        facts.update(
            eos_id=eos_id,
            sampled_eos=int(hits.sum()),
            sampled_tokens=int(block.size),
            sampled_rows=int(block.shape[0]),
            rows_with_eos=int(hits.any(axis=1).sum()),
            block_tokens=int(block.shape[1]),
        )
        if bos_id is not None and bos_id != eos_id:
            # A BOS-first packing marks each document's start instead of its end: a boundary too.
            bounds = hits | (block == bos_id)
            facts.update(
                bos_id=bos_id,
                sampled_boundaries=int(bounds.sum()),
                rows_with_boundary=int(bounds.any(axis=1).sum()),
            )
    return facts


def lm_evidence(dm: Any, module: Any, batch: Any, setup_fp: str | None = None) -> dict[str, Any]:
    """Everything :func:`~lightning_order.checks.lm.check_lm` reads, from ``dm``, its ledger, ``module``
    and a sampled train ``batch``; ``setup_fp``: the tokenizer's fingerprint at the validator's setup."""
    tokenizer = _tokenizer(dm)
    ledger = datamodule_ledger(dm)
    info = ledger.info if ledger is not None else {}
    recorded = lm_ledger_evidence(ledger) if ledger is not None else {}
    evidence = {**_tokenizer_facts(tokenizer), **recorded, **_model_facts(module)}
    if setup_fp is not None:
        evidence["setup_tokenizer_fp"] = setup_fp
    evidence.update(_sample_facts(batch, _eos_id(dm, tokenizer, info), _bos_id(dm, tokenizer)))
    return evidence


def judges_labels(module: Any) -> bool:
    """Whether :func:`label_shift_violations` judges ``module``'s labels: a ``transformers`` causal LM
    (it shifts them itself) or an :class:`~lightning_order.OrderedCausalLM` (it does not)."""
    from lightning_order.models.causal_lm import OrderedCausalLM

    return hf_causal_lm(module) is not None or isinstance(module, OrderedCausalLM)


def label_shift_violations(dm: Any, module: Any, sample_rows: int, batch: Any = _UNDRAWN) -> list[Violation]:
    """The labels against the model's loss convention, from sampled train batches.

    ``labels-shifted-twice`` (:func:`~lightning_order.checks.label_shift.check_label_shift`): a
    ``transformers`` causal LM in ``module`` fed labels already shifted; ``labels-not-shifted``
    (:func:`~lightning_order.checks.label_shift.check_unshifted_labels`): an
    :class:`~lightning_order.OrderedCausalLM` (which does not shift) fed labels equal to its inputs.
    Draws no batch for any other module (tokenizer or not: a ``run_clm.py`` datamodule exposes
    none). Only dict batches holding ``labels`` count, the form ``model(**batch)`` passes to the
    model's loss; a tuple ``(x, y)`` (nanoGPT's) is the targets of the module's own cross-entropy.
    ``batch``: the sampled train batch when the caller drew it already (drawn here otherwise).
    """
    if not judges_labels(module) or dm is None:
        return []
    if batch is _UNDRAWN:
        batch, _ = sample_batch(dm, "train_dataloader", sample_rows)
    model = hf_causal_lm(module)
    if not isinstance(batch, Mapping) or "labels" not in batch:
        return []
    ids, labels = as_numpy(batch_field(batch, "input_ids")), as_numpy(batch_field(batch, "labels"))
    if ids is None or labels is None or ids.ndim != 2 or ids.shape != labels.shape:
        return []
    rows = int(ids.shape[0])
    if model is not None:
        return check_label_shift(True, preshifted_rows(ids, labels), rows, type(model).__name__)
    return check_unshifted_labels(unshifted_rows(ids, labels), rows, type(module).__name__)


def end_ids(tokenizer: Any, eos_id: int | None) -> tuple[int, ...]:
    """The ids that end a document or a chat turn: ``eos_id`` and every end-of-text / end-of-turn
    token the tokenizer declares special (``<|im_end|>``, ``<|eot_id|>``, ...)."""
    found = [eos_id] if eos_id is not None else []
    found += _declared_ids(tokenizer, _EOS_NAMES + _END_OF_TURN_NAMES) if tokenizer is not None else []
    return tuple(dict.fromkeys(found))


def sampled_only(violation: Violation) -> bool:
    """Whether ``violation`` rests on sampled rows alone (a guess: it may only warn).

    The label and end/start-of-document rules read off the sampled batch, and truncation of padded
    one-document rows; the tokenizer's and the model's facts, the records, and what contradicts a
    record (served positions against a recorded ``document_attention``, the probe) are proof.
    """
    if violation.rule in _SAMPLED_RULES:
        return True
    return violation.rule == "documents-truncated" and bool(violation.details.get("padded"))


@dataclass(frozen=True)
class LMFindings:
    """:func:`lm_findings`' result.

    Attributes:
        proof: violations from records, the tokenizer, the model or a probe: they may stop the run.
        sampled: violations read from sampled rows only (:func:`sampled_only`): warned unless step 1
            decides their rule.
        facts: what step 1's rules read besides the step itself.
    """

    proof: list[Violation]
    sampled: list[Violation]
    facts: TokenFacts


def lm_findings(dm: Any, module: Any, sample_rows: int, setup_fp: str | None = None) -> LMFindings:
    """The LM checks of an LM run (nothing for another datamodule, with document-aware packing the
    served positions too), split by evidence, with the facts for the step-1 rules.

    Args:
        dm: the datamodule.
        module: the LightningModule (or model).
        sample_rows: train rows sampled.
        setup_fp: :func:`tokenizer_in_use` at the validator's ``setup``.
    """
    found, facts = _lm_checks(dm, module, sample_rows, setup_fp)
    return LMFindings([v for v in found if not sampled_only(v)], [v for v in found if sampled_only(v)], facts)


def _lm_checks(
    dm: Any, module: Any, sample_rows: int, setup_fp: str | None
) -> tuple[list[Violation], TokenFacts]:
    tokenizer = _tokenizer(dm) if dm is not None else None
    readable = tokenizer is not None and (is_lm(dm) or is_tokenizer(tokenizer))
    if dm is None or not (readable or judges_labels(module)):
        return [], TokenFacts()  # nothing to judge: no batch is drawn for nothing
    batch, _ = sample_batch(dm, "train_dataloader", sample_rows)  # one draw serves every check here
    shifted = label_shift_violations(dm, module, sample_rows, batch)
    eos_id = _eos_id(dm, tokenizer, {}) if tokenizer is not None else None
    facts = TokenFacts(
        eos_id=eos_id, end_ids=end_ids(tokenizer, eos_id), separate_documents=document_attention_on(dm)
    )
    if not readable or not is_lm(dm, batch):
        return shifted, facts
    evidence = lm_evidence(dm, module, batch, setup_fp)
    found = [*shifted, *check_lm(evidence), *document_violations(dm, module, batch, evidence.get("eos_id"))]
    found += tokenizer_fit_violations(dm, module, batch, sample_rows)
    bos_id = _bos_id(dm, tokenizer)
    tokens = token_evidence(dm, tokenizer, batch, evidence.get("eos_id"), bos_id, sample_rows)
    found += tokens.violations
    eos_id = evidence.get("eos_id")
    facts = TokenFacts(
        eos_id=eos_id,
        end_ids=end_ids(tokenizer, eos_id),
        bos_id=bos_id,
        separate_documents=document_attention_on(dm),
        val_starts=tokens.val_starts,
        adds_bos=tokens.adds_bos,
        template=tokens.template,
        pad_id=tokens.pad_id,
    )
    eos = eos_evidence(evidence)
    if eos is not None and not eos[0].hits and not any(v.rule == "pack-without-eos" for v in found):
        log.info(
            "OrderValidator: not enough evidence on end-of-text ids: %s hold none, too few to tell packing "
            "without boundaries (record pack's eos_rate, or sample more rows with sample_rows=)",
            eos[0].describe("blocks" if evidence.get("sampled_rows") else "tokens"),
        )
    return found, facts


def _gather_lm(trainer: Any, evidence: CheckEvidence) -> LMFindings:
    tokenizer = evidence.samples.get("tokenizer")
    sample_rows = int(evidence.settings.get("sample_rows") or 512)
    return lm_findings(trainer.datamodule, trainer.lightning_module, sample_rows, tokenizer)


register_check(
    "lm-batches",
    lambda evidence: list(evidence.gathered.proof),  # guesses from sampled rows wait for step 1
    phase=Phase.FIT_START,
    reads=[EvidenceKind.LEDGER, EvidenceKind.SAMPLES, EvidenceKind.MODEL],
    gather=_gather_lm,
    order=20,
    facts=lambda findings, _ranks: {"lm_sampled_guesses": findings.sampled, "lm_token_facts": findings.facts},
)
