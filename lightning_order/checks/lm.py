"""Language-modelling checks: does the model's table fit the tokenizer, and do the blocks hold boundaries?

Pure functions of one plain dict (``evidence``) that :mod:`lightning_order.callbacks.validator.lm`
gathers from the datamodule, the model and sampled batches; what a ledger holds is read by
:func:`lm_ledger_evidence`, the one reading the validator and the command line share
(:func:`check_lm_records` judges a ledger alone). Missing keys are skipped, so a hand-written LM
datamodule that only exposes its tokenizer gets the checks its evidence allows. The keys:

- ``tokenizer_size``, ``tokenizer_fp``: the tokenizer in use now (its size, added tokens
  included, and its fingerprint); ``recorded_vocab_fp``, ``recorded_vocab_size``,
  ``recorded_padded``: what ``build_vocab`` recorded and the padded size the ledger holds;
- ``embedding_rows``, ``head_rows``: rows of the model's token embedding and output head;
- ``max_token_id``: the largest id in the sampled batches;
- ``eos_id``, ``sampled_eos``, ``sampled_tokens``: end-of-text ids counted in the sampled
  blocks; ``sampled_rows``, ``rows_with_eos``, ``block_tokens``: the sampled blocks, those
  holding at least one end-of-text id, and the tokens of one block (inputs and the label's last);
  ``bos_id``, ``sampled_boundaries``, ``rows_with_boundary``: with a start-of-document id the
  tokenizer declares, the ids that are either, and the blocks holding one (with no recorded rate,
  a BOS-first packing's boundaries are its BOS ids);
  ``recorded_eos_rate``: the rate ``pack`` recorded for the train blocks;
  ``encode_eos`` (``encode``'s ``eos`` parameter), ``documents``, ``eos_tokens`` (its stats);
- ``straddling``: near-duplicate pairs across the split that ``dedup`` counted (it runs there
  only when it ran after the split);
- ``hf_model``: the model is a ``transformers`` one (the fix is ``resize_token_embeddings``);
- ``setup_tokenizer_fp``: the tokenizer's fingerprint when the validator's ``setup`` ran (a
  token added between then and the model check is a change, with no ledger needed).

Without a recorded end-of-text rate, "no boundaries" is decided from what was sampled: the share
of sampled blocks that hold an end-of-text id, with its Wilson interval
(:class:`~lightning_order.checks.estimates.RateEstimate`), against the least share that documents
averaging :data:`MAX_MEAN_DOCUMENT_TOKENS` tokens would give blocks of that length. A sample too
small to tell is "not enough evidence" (:func:`eos_evidence`), never a violation.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lightning_order.checks.estimates import RateEstimate
from lightning_order.rules import Violation

if TYPE_CHECKING:  # pragma: no cover
    from lightning_order.ledger import StepLedger

__all__ = [
    "EOS_RATE_BAND",
    "MAX_MEAN_DOCUMENT_TOKENS",
    "check_lm",
    "check_lm_config",
    "check_lm_ledger",
    "check_lm_records",
    "eos_evidence",
    "fit_fixes_to_model",
    "lm_ledger_evidence",
]

#: Sampled blocks may hold end-of-text ids at this factor of the recorded rate either way (documents
#: differ in length by orders of magnitude, so a sample's rate is far noisier than a count of coin flips).
EOS_RATE_BAND = 3.0
#: With no recorded end-of-text rate, the longest mean document (in tokens) the check assumes: a
#: block of ``b`` tokens then holds an end-of-text id with probability at least ``b / 4096``. A
#: corpus of longer documents (books) records ``pack``'s ``eos_rate`` so the recorded rate decides.
MAX_MEAN_DOCUMENT_TOKENS = 4096
_HF_FIX = (
    "call model.resize_token_embeddings(len(tokenizer)) after the last token is added to the tokenizer and "
    "before the optimizer is built (or add every special token before building the model)"
)


def lm_ledger_evidence(ledger: StepLedger) -> dict[str, Any]:
    """The evidence an LM ledger holds (the ``recorded_*``, ``encode_eos``, ``documents``,
    ``eos_tokens`` and ``straddling`` keys of the module docstring; absent where nothing was recorded).
    """
    evidence: dict[str, Any] = {}
    vocab = ledger.latest("build_vocab")
    if vocab is not None:
        evidence["recorded_vocab_fp"] = vocab.output
        evidence["recorded_vocab_size"] = vocab.stats.get("vocab_size")
    dims = ledger.info.get("dims") or {}
    if "padded_vocab_size" in dims:
        evidence["recorded_padded"] = dims["padded_vocab_size"]
    encode, pack, dedup = ledger.latest("encode"), ledger.latest("pack"), ledger.latest("dedup")
    if encode is not None and "eos" in encode.params:
        evidence["encode_eos"] = bool(encode.params["eos"])
        evidence["documents"] = encode.stats.get("documents")
        evidence["eos_tokens"] = encode.stats.get("eos_tokens")
    if pack is not None and "eos_rate" in pack.stats:
        evidence["recorded_eos_rate"] = float(pack.stats["eos_rate"])
    if dedup is not None and dedup.stats.get("straddling"):
        evidence["straddling"] = int(dedup.stats["straddling"])
    return evidence


def check_lm_config(config: Any, owner: str) -> list[Violation]:
    """``pack-without-eos`` of a config that turns end-of-text off (the LM spec's config check).

    Args:
        config: an :class:`~lightning_order.data.lm.config.LMConfig` (read: ``eos``).
        owner: the class the config is for, named in the message.
    """
    if getattr(config, "eos", True):
        return []
    return [
        Violation(
            "pack-without-eos",
            ("pack", "encode"),
            f"{owner}(eos=False) would concatenate documents without an end-of-text token",
        )
    ]


def check_lm_records(ledger: StepLedger) -> list[Violation]:
    """:func:`check_lm_ledger` on what ``ledger`` recorded (the LM spec's ledger check)."""
    return check_lm_ledger(lm_ledger_evidence(ledger))


def check_lm_ledger(evidence: Mapping[str, Any]) -> list[Violation]:
    """``pack-without-eos`` and ``dedup-after-split`` from what the ledger recorded."""
    found = []
    docs, eos = evidence.get("documents"), evidence.get("eos_tokens")
    if evidence.get("encode_eos") is False or (docs is not None and eos is not None and int(eos) < int(docs)):
        found.append(
            Violation(
                "pack-without-eos",
                ("pack", "encode"),
                f"encode put {eos if eos is not None else 0} end-of-text tokens after {docs} documents "
                "(eos=False): pack concatenated them without boundaries",
            )
        )
    straddling = evidence.get("straddling")
    if straddling:
        found.append(
            Violation(
                "dedup-after-split",
                ("split", "dedup"),
                f"{straddling} near-duplicate document pairs straddle the split: deduplication ran after it and "
                "could only compare documents within each side",
                details={"straddling": int(straddling)},
            )
        )
    return found


def _tokenizer_violations(ev: Mapping[str, Any]) -> list[Violation]:
    found = []
    size = ev.get("tokenizer_size")
    rows = {k: ev[k] for k in ("embedding_rows", "head_rows") if ev.get(k) is not None}
    fix = _HF_FIX if ev.get("hf_model") else ""
    changed = (
        ev.get("tokenizer_fp")
        and ev.get("recorded_vocab_fp")
        and ev["tokenizer_fp"] != ev["recorded_vocab_fp"]
    )
    since_setup = ev.get("tokenizer_fp") and ev.get("setup_tokenizer_fp") not in (None, ev["tokenizer_fp"])
    if since_setup and not changed:
        found.append(
            Violation(
                "vocab-changed-after-init",
                ("init_model", "build_vocab"),
                f"the tokenizer changed between the validator's setup and the model check (now {size} tokens): "
                "a token was added after the data was prepared, so the model and the data may disagree on ids",
                fix=fix,
                details={"setup": ev["setup_tokenizer_fp"], "now": ev["tokenizer_fp"]},
            )
        )
    if changed:
        was = ev.get("recorded_vocab_size")
        grew = f" (size {was} -> {size})" if was is not None and size is not None else ""
        found.append(
            Violation(
                "vocab-changed-after-init",
                ("init_model", "build_vocab"),
                f"the tokenizer in use is not the one build_vocab recorded{grew}: tokens were added or changed "
                "after the vocabulary was built and the model was sized from it",
                fix=fix,
                details={"recorded": ev["recorded_vocab_fp"], "now": ev["tokenizer_fp"]},
            )
        )
    short = {k: v for k, v in rows.items() if size is not None and int(v) < int(size)}
    if short:
        text = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in short.items())
        found.append(
            Violation(
                "vocab-changed-after-init",
                ("init_model", "build_vocab"),
                f"the tokenizer holds {size} tokens but the model has {text}: ids from {min(short.values())} on "
                "raise 'index out of range in self' (a device-side assert on GPU)",
                fix=fix,
                details={"tokenizer_size": size, **short},
            )
        )
    top = ev.get("max_token_id")
    table = min(rows.values()) if rows else None
    if top is not None and table is not None and int(top) >= int(table) and not short:
        found.append(
            Violation(
                "vocab-changed-after-init",
                ("init_model", "encode"),
                f"the batches hold token id {top}, but the model's table has {table} rows: the data was encoded "
                "with a larger tokenizer than the model was built for",
                fix=fix,
                details={"max_token_id": top, "rows": table},
            )
        )
    elif top is not None and size is not None and int(top) >= int(size) and not short:
        found.append(
            Violation(
                "vocab-changed-after-init",
                ("init_model", "encode"),
                f"the batches hold token id {top}, but the tokenizer in use has {size} tokens: no text encodes to it "
                "(it falls in the model's padding rows, which only ever learn to be avoided); the blocks were not "
                "encoded with this tokenizer: prepare the data again with it",
                details={"max_token_id": top, "tokenizer_size": size},
            )
        )
    padded = ev.get("recorded_padded")
    head = ev.get("head_rows")
    if padded is not None and head is not None and int(head) != int(padded) and not short:
        found.append(
            Violation(
                "init-before-data",
                ("init_model", "encode"),
                f"the output head has {head} rows, the data's padded_vocab_size is {padded}",
                details={"differing": {"head_rows": (head, padded)}},
            )
        )
    return found


def fit_fixes_to_model(violations: list[Violation], hf_model: bool) -> list[Violation]:
    """The violations, with a ``transformers`` fix (``resize_token_embeddings``) where the model is one and
    its token table is what disagrees (``Model(**dm.dims)`` does not fit an HF model)."""
    if not hf_model:
        return violations
    table = [
        v.rule == "vocab-changed-after-init"
        or (v.rule == "init-before-data" and "embedding_rows" in (v.details.get("differing") or {}))
        for v in violations
    ]
    return [dataclasses.replace(v, fix=_HF_FIX) if hit else v for v, hit in zip(violations, table)]


def eos_evidence(ev: Mapping[str, Any]) -> tuple[RateEstimate, float] | None:
    """With no recorded rate: the share of sampled blocks holding an end-of-text id, and the least
    share documents of at most :data:`MAX_MEAN_DOCUMENT_TOKENS` tokens on average would give.

    Falls back to tokens as the unit when the blocks were not counted. ``None`` when there is no
    sample or a recorded rate decides.
    """
    if ev.get("eos_id") is None or ev.get("recorded_eos_rate") is not None:
        return None
    # A BOS-first packing (no end-of-text) marks each document's start: its BOS ids are the boundaries.
    with_eos = ev.get("rows_with_boundary", ev.get("rows_with_eos"))
    rows, width = ev.get("sampled_rows"), ev.get("block_tokens")
    if rows and with_eos is not None and width:
        return RateEstimate(int(with_eos), int(rows)), min(1.0, int(width) / MAX_MEAN_DOCUMENT_TOKENS)
    seen, tokens = ev.get("sampled_boundaries", ev.get("sampled_eos")), ev.get("sampled_tokens")
    if seen is None or not tokens:
        return None
    return RateEstimate(min(int(seen), int(tokens)), int(tokens)), 1.0 / MAX_MEAN_DOCUMENT_TOKENS


def _unrecorded_eos(ev: Mapping[str, Any]) -> list[Violation]:
    found = eos_evidence(ev)
    if found is None:
        return []
    estimate, floor = found
    if estimate.hits or not estimate.below(floor):
        return []  # boundaries seen, or too small a sample to tell (eos_evidence says which)
    units = "sampled blocks" if ev.get("sampled_rows") else "sampled tokens"
    bos = f" nor start-of-document id ({ev['bos_id']})" if ev.get("bos_id") is not None else ""
    return [
        Violation(
            "pack-without-eos",
            ("pack", "encode"),
            f"no end-of-text id ({ev['eos_id']}){bos} in {estimate.n} {units} (95% interval of the share holding one: "
            f"0-{estimate.interval[1]:.2%}); documents averaging up to {MAX_MEAN_DOCUMENT_TOKENS} tokens would "
            f"put one in at least {floor:.2%} of them: documents are packed without boundaries",
            details={"estimate": estimate.to_dict(), "least_expected": floor},
        )
    ]


def _eos_violations(ev: Mapping[str, Any]) -> list[Violation]:
    eos_id, seen, tokens = ev.get("eos_id"), ev.get("sampled_eos"), ev.get("sampled_tokens")
    if eos_id is None or seen is None or not tokens:
        return []
    rate = ev.get("recorded_eos_rate")
    if rate is None:
        return _unrecorded_eos(ev)
    expected = float(rate) * tokens
    if rate == 0:
        return []  # the ledger check reports a pipeline that recorded no boundaries
    too_few = (seen == 0 and expected >= 10) or (
        seen > 0 and expected >= 30 and seen * EOS_RATE_BAND < expected
    )
    too_many = expected >= 30 and seen > EOS_RATE_BAND * expected + 3 * math.sqrt(expected)
    if not (too_few or too_many):
        return []
    return [
        Violation(
            "pack-without-eos",
            ("pack", "encode"),
            f"the sampled blocks hold {seen} end-of-text ids in {tokens} tokens; pack recorded a rate of "
            f"{rate:.5f} (about {expected:.0f} expected): the blocks served are not the blocks the ledger describes",
            details={"sampled_eos": seen, "expected": expected},
        )
    ]


def check_lm(evidence: Mapping[str, Any]) -> list[Violation]:
    """Every LM violation the evidence shows (see the module docstring for its keys).

    Returns:
        ``vocab-changed-after-init`` (the tokenizer changed since ``build_vocab``, or holds more
        tokens than the model has rows, or the batches hold ids beyond them), ``init-before-data``
        (an output head not of the recorded padded size), ``pack-without-eos`` (no boundaries
        recorded, or sampled at a rate far from the recorded one), ``dedup-after-split``.
    """
    return [*check_lm_ledger(evidence), *_tokenizer_violations(evidence), *_eos_violations(evidence)]
