"""A language-modelling run, as the validator sees it: its tokenizer, model rows, sampled blocks and documents.

What the validator gathers on an LM run (with a ledger or with no glue) for the LM checks: the
tokenizer in use and what it declares, the model's rows, the sampled train batch's labels and
tokens (document start and end, padding, truncation), whether the tokenizer was fitted on clean
text, and, with document-aware packing, whether attention crosses documents. Guesses from
sampled rows wait for step 1 (:mod:`.step_one`), which decides or warns them.

**The LM run.** What the validator gathers on a language-modelling run (the judgement is :func:`~lightning_order.checks.lm.check_lm`).

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

**Tokens, document starts and ends.** What the validator gathers on how documents start and end in an LM run's rows (issue #37).

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

**The tokenizer's fit.** What the validator gathers to see a tokenizer trained before cleaning, with no record (zero glue).

The judgement is :func:`~lightning_order.checks.tokenizer_fit.check_tokenizer_fit`; this module
reads its evidence off the datamodule's ``tokenizer`` (a ``tokenizers.Tokenizer`` or a
``transformers`` fast tokenizer: its vocabulary, each entry decoded, its special tokens left out)
and off the sampled train batch (the ids of its ``input_ids`` and of its labels' last column, the
one token only the labels hold). Gathering only, over duck-typed objects: a tokenizer it cannot
read, or a batch without integer token ids, gives no evidence and no violation.

**Document-aware attention.** What the validator gathers when document-aware packing is on (the judgement is
:func:`~lightning_order.checks.document_attention.check_document_attention`).

The option is read from the datamodule's ledger (``info["document_attention"]``, recorded at
``setup`` by :class:`~lightning_order.OrderedLMDataModule`) or its config. From the train batch
the LM checks already drew: whether it holds ``position_ids`` and whether they restart exactly
after each end-of-text id; then one probe, cheap and side-effect free: one row holding a document
boundary is run through the model twice (eval mode, no gradients, the training mode restored),
once with the tokens of the document before the boundary changed, and the next document's logits
are compared with how far the logits of that document's end-of-text move (a token unchanged
that may attend to the changed ones: a relative figure, since a small model at random
initialisation moves little either way). A model that keeps documents apart gives
the same logits. The probe runs for the
models whose call form is known: :class:`~lightning_order.OrderedCausalLM` (the batch) and a
``transformers`` causal LM in the module (the batch as keywords, as ``model(**batch)`` trains).

**Instruction rows that keep none of their answer.** A dataset that trains on its prompts (a
map-style dataset with a boolean ``mask_prompt`` set to ``False``, as litgpt's ``SFTDataset``)
gives every row targets, so ``rows-without-target`` cannot see at step 1 a row cut inside its
prompt. :func:`answers_kept` reads a shallow copy of the dataset with ``mask_prompt=True`` by index
(its first :data:`ANSWER_ROWS` rows, no sampler, no worker, the random states put back): a row
whose ``labels`` are then all ignored held no answer (judged by
:func:`~lightning_order.checks.truncation.check_answers_cut_away`). The run's dataset is not modified.
"""

from __future__ import annotations

import copy
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from lightning_order.callbacks.validator.phases import agree, model_dims, spec_of
from lightning_order.callbacks.validator.reading import (
    as_numpy,
    batch_field,
    is_stream,
    leaf_array,
    read_split_tokens,
    sample_batch,
    train_loader,
    untouched,
)
from lightning_order.checks.bos import StartCounts, check_bos, count_starts
from lightning_order.checks.document_attention import check_document_attention, misplaced_position_rows
from lightning_order.checks.eos_labels import (
    check_eos_labels,
    check_rows_end,
    masked_eos_rows,
    unterminated_rows,
)
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
from lightning_order.checks.token_rows import (
    LENGTHS_PADDED_SHARE,
    document_lengths,
    document_starts,
    is_padded,
    joined_windows,
    stream_document_lengths,
)
from lightning_order.checks.tokenizer_fit import check_tokenizer_fit, tokenizer_fit_evidence
from lightning_order.checks.truncation import (
    AnswersKept,
    Pile,
    check_answers_cut_away,
    check_truncation,
    length_pile,
)
from lightning_order.fingerprints import is_tokenizer, tokenizer_backend, tokenizer_fingerprint
from lightning_order.models.hf import hf_causal_lm
from lightning_order.pipelines import PIPELINES, spec_of_class
from lightning_order.recorder import datamodule_ledger
from lightning_order.rules import Violation

__all__ = [
    "ANSWER_ROWS",
    "LMFindings",
    "answers_kept",
    "STREAM_LENGTH_TOKENS",
    "TokenEvidence",
    "TokenizerFacts",
    "document_attention_on",
    "document_violations",
    "end_ids",
    "is_hf_model",
    "is_lm",
    "judges_labels",
    "label_shift_violations",
    "lm_evidence",
    "lm_findings",
    "padding_from_labels",
    "probe_leak",
    "sampled_only",
    "sampled_token_ids",
    "token_evidence",
    "tokenizer_facts",
    "tokenizer_fit_violations",
    "tokenizer_in_use",
    "tokenizer_vocabulary",
]

log = logging.getLogger(__name__)


# == The LM run ====================================================================================
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


def _is_ordered_causal_lm(module: Any) -> bool:
    """Whether ``module`` is an :class:`~lightning_order.OrderedCausalLM`, asked without importing it:
    none exists unless its module was imported, and importing it would bring Lightning into the
    plain loops' guard."""
    loaded = sys.modules.get("lightning_order.models.causal_lm")
    return loaded is not None and isinstance(module, loaded.OrderedCausalLM)


def judges_labels(module: Any) -> bool:
    """Whether :func:`label_shift_violations` judges ``module``'s labels: a ``transformers`` causal LM
    (it shifts them itself) or an :class:`~lightning_order.OrderedCausalLM` (it does not)."""
    return hf_causal_lm(module) is not None or _is_ordered_causal_lm(module)


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
    return lm_findings(evidence.datamodule, trainer.lightning_module, sample_rows, tokenizer)


register_check(
    "lm-batches",
    lambda evidence: list(evidence.gathered.proof),  # guesses from sampled rows wait for step 1
    phase=Phase.FIT_START,
    reads=[EvidenceKind.LEDGER, EvidenceKind.SAMPLES, EvidenceKind.MODEL],
    gather=_gather_lm,
    order=20,
    facts=lambda findings, _ranks: {"lm_sampled_guesses": findings.sampled, "lm_token_facts": findings.facts},
)


# == Tokens, document starts and ends ==============================================================
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
    back: :func:`~.reading.read_split_tokens`), and only windows of one width join.
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


# == The tokenizer's fit ===========================================================================
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


# == Document-aware attention ======================================================================
def document_attention_on(dm: Any) -> bool:
    """Whether ``dm`` serves document-aware batches: its ledger's ``info["document_attention"]``, else its config's."""
    ledger = datamodule_ledger(dm)
    recorded = ledger.info.get("document_attention") if ledger is not None else None
    if isinstance(recorded, bool):
        return recorded
    return getattr(getattr(dm, "config", None), "document_attention", False) is True


def _boundary(ids: torch.Tensor, eos_id: int) -> tuple[int, int] | None:
    """A ``(row, eos_index)`` with at least two tokens before the end-of-text id and one after it."""
    for row in range(ids.shape[0]):
        hits = (ids[row, :-1] == eos_id).nonzero().flatten().tolist()
        # The first end-of-text of the row: the tokens before it are all in one (previous) document.
        if hits and hits[0] >= 2:
            return row, int(hits[0])
    return None


def _logits(module: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor | None:
    model = hf_causal_lm(module)
    if model is not None:
        logits: torch.Tensor = model(**inputs).logits
        return logits
    if _is_ordered_causal_lm(module):
        return torch.as_tensor(module(inputs))
    return None  # an unknown call form: no probe


def probe_leak(module: Any, batch: Mapping[str, Any], eos_id: int) -> float | None:
    """How far the next document's logits move when the previous document's tokens change, relative to how
    far the logits of that document's end-of-text move (0: kept apart); ``None``: no probe.

    One row of ``batch`` with a boundary, its ``labels`` left out; the tokens before its first
    end-of-text id are rotated by one (the same ids, another text; the end-of-text id kept, so the
    positions stay the same).
    """
    ids = batch.get("input_ids")
    if not torch.is_tensor(ids) or ids.ndim != 2:
        return None
    found = _boundary(ids, eos_id)
    if found is None:
        return None
    row, eos_at = found
    changed = ids[row : row + 1].clone()
    changed[0, :eos_at] = changed[0, :eos_at].roll(1)
    if torch.equal(changed, ids[row : row + 1]):
        return None  # one repeated token: nothing to change
    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    inputs = {
        k: v[row : row + 1].to(device) for k, v in batch.items() if k != "labels" and torch.is_tensor(v)
    }
    was_training = module.training
    module.eval()  # no dropout: the two forwards differ only by the changed tokens
    try:
        with torch.no_grad():
            before = _logits(module, inputs)
            after = _logits(module, {**inputs, "input_ids": changed.to(device)})
    finally:
        module.train(was_training)
    if before is None or after is None:
        return None
    moved = _largest((before[0] - after[0]).float())
    # The end-of-text token is unchanged and may attend to the changed tokens: the reference move.
    reference, next_document = float(moved[eos_at]), moved[eos_at + 1 :]
    if not next_document.numel() or reference == 0.0:
        return None  # the model's logits do not depend on the earlier tokens at all: nothing to compare
    return float(next_document.max()) / reference


def _largest(diff: torch.Tensor) -> torch.Tensor:
    """Per position, the largest absolute change of a finite logit (padding rows are ``-inf`` in both)."""
    return torch.where(torch.isfinite(diff), diff.abs(), torch.zeros_like(diff)).amax(dim=-1)


def document_violations(dm: Any, module: Any, batch: Any, eos_id: int | None) -> list[Violation]:
    """``attention-crosses-documents`` for a run with document-aware packing on (nothing otherwise).

    Args:
        dm: the datamodule.
        module: the LightningModule (or model).
        batch: the sampled train batch (a dict).
        eos_id: the end-of-text id (``None``: unknown, nothing to judge).
    """
    if dm is None or eos_id is None or not isinstance(batch, Mapping) or not document_attention_on(dm):
        return []
    ids, positions = as_numpy(batch_field(batch, "input_ids")), as_numpy(batch_field(batch, "position_ids"))
    if ids is None or ids.ndim != 2:
        return []
    misplaced = 0 if positions is None else misplaced_position_rows(ids, positions, eos_id)
    leak = None
    if positions is not None and not misplaced:
        try:
            leak = probe_leak(module, batch, eos_id)
        except Exception as err:  # a model that cannot run one row here: the positions are still judged
            log.info("OrderValidator: no attention probe on %s (%s)", type(module).__name__, err)
    model = hf_causal_lm(module)
    return check_document_attention(
        rows=int(ids.shape[0]),
        has_positions=positions is not None,
        misplaced=misplaced,
        leak=leak,
        model=type(model if model is not None else module).__name__,
    )


# -- instruction rows that keep none of their answer ------------------------------------------
#: Rows read from the copy (the first ones, by index).
ANSWER_ROWS = 64


def answers_kept(dataset: Any, rows: int = ANSWER_ROWS) -> AnswersKept | None:
    """How many of ``dataset``'s first rows keep an answer once their prompt is masked.

    ``None`` when the dataset does not train on its prompts (no ``mask_prompt`` set to ``False``),
    is not map-style, or its rows carry no ``labels``.
    """
    if getattr(dataset, "mask_prompt", None) is not False or isinstance(dataset, torch.utils.data.IterableDataset):
        return None
    try:
        count = min(len(dataset), rows)
        masked = copy.copy(dataset)
        masked.mask_prompt = True
        ignore = getattr(dataset, "ignore_index", -100)
        without = 0
        with untouched(dataset) as unread:
            if unread is not None:
                return None
            for index in range(count):
                item = masked[index]
                labels = leaf_array(item.get("labels")) if isinstance(item, Mapping) else None
                if labels is None:
                    return None
                without += int(labels.size > 0 and bool(np.all(labels == ignore)))
    except Exception as err:  # a dataset that cannot be copied or read here: no evidence, the run goes on
        log.debug("OrderValidator: could not read the train rows with their prompt masked (%s)", err)
        return None
    length = getattr(dataset, "max_seq_length", None)
    cut = int(length) if isinstance(length, int) and length > 0 else None
    return AnswersKept(rows=count, without_answer=without, max_seq_length=cut)


def _gather_answers(trainer: Any, evidence: Any) -> list[dict[str, Any]]:
    loader = train_loader(trainer)
    kept = answers_kept(getattr(loader, "dataset", None))
    return [v.to_dict() for v in check_answers_cut_away(kept)]


# At train start, off the loader Lightning will iterate; every rank reads its own (the same rows).
register_check(
    "answers-cut-away",
    lambda evidence: agree(list(evidence.ranks)),
    phase=Phase.TRAIN_START,
    reads=[EvidenceKind.RANKS],
    rules=["rows-without-target"],
    gather=_gather_answers,
    order=40,
)
