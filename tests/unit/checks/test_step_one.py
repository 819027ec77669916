"""The step-1 judge on plain observations (lightning_order/checks/step_one.py), issue #43 items 2-3."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.checks.bos import StartCounts
from lightning_order.checks.step_one import (
    LossSeen,
    StepOne,
    TokenFacts,
    judge_step_one,
    separated_boundaries,
    target_offset,
)

EOS, BOS = 2, 1


def ids(rows: int = 4, width: int = 24, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, 200, size=(rows, width))


def targets_at(x: np.ndarray, offset: int) -> np.ndarray:
    """The targets a loss sees when its labels are the ids shifted by ``offset`` (-100 past the row)."""
    out = np.full(x.shape, -100)
    out[:, : x.shape[1] - offset] = x[:, offset:]
    return out


def step(x: np.ndarray, targets: np.ndarray | None = None, **kwargs) -> StepOne:
    losses = () if targets is None else (LossSeen(targets, rows=x.shape[0], empty_rows=_empty(targets)),)
    return StepOne(ids=x, losses=losses, model="LlamaForCausalLM", call_seen=True, **kwargs)


def _empty(targets: np.ndarray) -> int:
    return int((targets == -100).all(axis=1).sum())


def rules(verdict) -> list[str]:
    return [v.rule for v in verdict.violations]


@pytest.mark.parametrize("offset", [0, 1, 2])
def test_the_offset_of_the_targets_is_read_off_the_ids(offset):
    x = ids()
    assert target_offset(x, targets_at(x, offset)) == offset


def test_targets_that_are_not_the_ids_have_no_offset():
    x = ids()
    assert target_offset(x, ids(seed=1)) is None  # another sequence: distillation, a classifier's labels
    assert target_offset(np.full((4, 24), 7), np.full((4, 24), 7)) is None  # every offset fits: no verdict
    assert target_offset(x, np.full(x.shape, -100)) is None  # nothing kept


@pytest.mark.parametrize(
    "offset, labels_to_model, expected",
    [(1, False, []), (1, True, []), (2, True, ["labels-shifted-twice"]), (0, False, ["labels-not-shifted"])],
)
def test_the_label_rules_follow_the_observed_offset(offset, labels_to_model, expected):
    x = ids()
    verdict = judge_step_one(step(x, targets_at(x, offset), labels_to_model=labels_to_model), TokenFacts())
    assert rules(verdict) == expected
    assert {"labels-shifted-twice", "labels-not-shifted", "rows-without-target"} <= verdict.decided
    if expected == ["labels-shifted-twice"]:
        assert "got labels= and shifts labels inside its loss" in verdict.violations[0].message


def test_no_loss_seen_decides_no_label_rule():
    verdict = judge_step_one(step(ids()), TokenFacts(eos_id=EOS))
    assert rules(verdict) == [] and not verdict.decided & {"labels-shifted-twice", "rows-without-target"}


def test_rows_whose_every_target_is_ignored_are_named():
    x = ids()
    t = targets_at(x, 1)
    t[1:3] = -100  # two answers cut away
    verdict = judge_step_one(step(x, t), TokenFacts())
    assert rules(verdict) == ["rows-without-target"]
    assert verdict.violations[0].details == {"empty_rows": 2, "rows": 4, "source": "cross_entropy"}


def test_rows_without_target_are_named_when_the_few_rows_left_keep_few_targets():
    # litgpt SFT with max_seq_length shorter than most prompts and mask_prompt=True (#48): 3 rows
    # of 4 keep no target, the fourth 3 (fewer than MIN_TARGETS): every kept one is the next id.
    x = ids()
    t = np.full(x.shape, -100)
    t[3, 20:23] = x[3, 21:24]
    verdict = judge_step_one(step(x, t), TokenFacts())
    assert rules(verdict) == ["rows-without-target"] and verdict.violations[0].details["empty_rows"] == 3
    assert target_offset(x, np.where(t == -100, -100, (t + 1) % 200)) is None  # a few that do not match


def padded(
    x: np.ndarray, lengths: list[int], end: int | None = EOS, pad: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    x, mask = x.copy(), np.zeros(x.shape, dtype=np.int64)
    for row, length in enumerate(lengths):
        if end is not None:
            x[row, length - 1] = end
        x[row, length:], mask[row, :length] = pad, 1
    return x, mask


def labels_by_mask(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return targets_at(np.where(mask == 1, x, -100), 1)


def test_end_of_text_targets_masked_in_every_row_holding_one_are_named():
    x, mask = padded(ids(), [20, 18, 22, 15], pad=EOS)  # pad id = end-of-text id
    t = labels_by_mask(x, mask)
    t[t == EOS] = -100  # the collator masked every pad id, and with them every end
    verdict = judge_step_one(step(x, t, attention_mask=mask), TokenFacts(eos_id=EOS, pad_id=EOS))
    assert (
        rules(verdict) == ["eos-label-masked"]
        and "the pad id is the end-of-text id" in verdict.violations[0].message
    )
    kept = judge_step_one(
        step(x, labels_by_mask(x, mask), attention_mask=mask), TokenFacts(eos_id=EOS, pad_id=EOS)
    )
    assert rules(kept) == [] and "eos-label-masked" in kept.decided


def test_padded_rows_without_an_end_are_named_with_the_template():
    x, mask = padded(ids(), [20, 18, 22, 15], end=None)
    facts = TokenFacts(eos_id=EOS, end_ids=(EOS,), template="<s> $A")
    verdict = judge_step_one(step(x, labels_by_mask(x, mask), attention_mask=mask), facts)
    assert rules(verdict) == ["documents-without-eos"] and "'<s> $A'" in verdict.violations[0].message


def test_chatml_rows_ending_with_a_newline_after_a_kept_end_of_turn_are_silent():
    im_end, newline = 5, 6
    x, mask = padded(ids(), [20, 18, 22, 15], end=newline)
    for row, length in enumerate([20, 18, 22, 15]):
        x[row, length - 2] = im_end
    verdict = judge_step_one(step(x, labels_by_mask(x, mask), attention_mask=mask), TokenFacts(eos_id=im_end))
    assert rules(verdict) == [] and "documents-without-eos" in verdict.decided


def flattened(starts: list[int], width: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """One row of documents starting at ``starts``, labelled like DataCollatorWithFlattening."""
    x = ids(1, width)
    labels = x.copy()
    labels[0, starts] = -100
    return x, targets_at(labels, 1)


@pytest.mark.parametrize(
    "positions, expected",
    [
        ("restarting", []),
        ("counting on", ["attention-crosses-documents"]),
        ("none", ["attention-crosses-documents"]),
    ],
)
def test_flattened_documents_need_positions_that_restart(positions, expected):
    x, t = flattened([0, 20, 45])
    pos = {
        "restarting": np.concatenate([np.arange(20), np.arange(25), np.arange(15)])[None],
        "counting on": np.arange(60)[None],
        "none": None,
    }[positions]
    verdict = judge_step_one(step(x, t, position_ids=pos), TokenFacts())
    assert rules(verdict) == expected
    if expected:
        assert "2 document starts" in verdict.violations[0].message


def test_kernel_boundaries_or_packing_that_trains_across_documents_are_silent():
    x, t = flattened([0, 20, 45])
    assert rules(judge_step_one(step(x, t, cu_seq_lens=True), TokenFacts())) == []
    packed = ids(2, 40)
    packed[:, [9, 25]] = EOS  # group_texts: documents packed, every target kept
    assert separated_boundaries(packed, targets_at(packed, 1), -100, 1, EOS) == []
    assert rules(judge_step_one(step(packed, targets_at(packed, 1)), TokenFacts(eos_id=EOS))) == []


def test_completion_only_prompts_are_no_document_starts():
    x = ids(1, 40)
    labels = x.copy()
    labels[0, :12] = -100  # a masked prompt, then the answer
    assert separated_boundaries(x, targets_at(labels, 1), -100, 1, EOS) == []


def test_recorded_document_attention_judges_the_positions_at_every_end_of_text():
    x = ids(1, 40)
    x[0, [9, 25]] = EOS
    facts = TokenFacts(eos_id=EOS, separate_documents=True)
    verdict = judge_step_one(step(x, targets_at(x, 1), position_ids=np.arange(40)[None]), facts)
    assert rules(verdict) == ["attention-crosses-documents"]


def test_bos_twice_at_the_observed_document_starts_is_named():
    x, mask = padded(ids(8, 24), [20, 18, 22, 15, 20, 19, 21, 16])
    x[:, 0] = x[:, 1] = BOS
    verdict = judge_step_one(
        step(x, labels_by_mask(x, mask), attention_mask=mask), TokenFacts(eos_id=EOS, bos_id=BOS)
    )
    assert rules(verdict) == ["bos-mismatch"] and verdict.violations[0].message.startswith("in step 1's rows")
    once = x.copy()
    once[:, 1] = 7
    val = StartCounts(8, 8, 0)
    verdict = judge_step_one(
        step(once, None, attention_mask=mask), TokenFacts(eos_id=EOS, bos_id=BOS, val_starts=val)
    )
    assert rules(verdict) == [] and "bos-mismatch" in verdict.decided


def test_ids_beyond_the_embedding_come_from_its_input_only():
    x = ids()
    over = step(x, max_id=300, embedding_rows=256, position_ids=np.arange(24)[None])
    assert rules(judge_step_one(over, TokenFacts())) == ["vocab-changed-after-init"]
    # position_ids up to 999 in a row longer than the vocabulary: no token id, nothing to say
    long_row = step(x, max_id=199, embedding_rows=256, position_ids=np.arange(1000)[None])
    assert rules(judge_step_one(long_row, TokenFacts())) == []


def test_positions_are_not_judged_without_the_model_call():
    """A hand-written model (OrderedCausalLM) reads positions from its batch, out of the observer's sight."""
    x, t = flattened([0, 20, 45])
    unseen = StepOne(ids=x, losses=(LossSeen(t, rows=1),), model="OrderedCausalLM")
    verdict = judge_step_one(unseen, TokenFacts(eos_id=EOS, separate_documents=True))
    assert rules(verdict) == [] and "attention-crosses-documents" not in verdict.decided


def test_an_auxiliary_masked_loss_with_an_unmasked_row_is_no_row_without_target():
    x = ids()
    masked_lm = np.full(x.shape, -100)
    masked_lm[0, [3, 9]] = 17  # a masked-LM head's targets: one row masked, the others not at all
    aux = LossSeen(masked_lm, rows=4, empty_rows=3, source="cross_entropy")
    verdict = judge_step_one(StepOne(ids=x, losses=(aux,), call_seen=True), TokenFacts())
    assert rules(verdict) == []
    nothing = LossSeen(np.full(x.shape, -100), rows=4, empty_rows=4)
    assert rules(judge_step_one(StepOne(ids=x, losses=(nothing,)), TokenFacts())) == ["rows-without-target"]
