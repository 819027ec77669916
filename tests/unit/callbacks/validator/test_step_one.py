"""The step-1 observer (lightning_order/callbacks/validator/step_one.py) and the sampled/proof split of lm.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional

from lightning_order.callbacks.validator.lm import sampled_only
from lightning_order.callbacks.validator.step_one import MAX_ROWS, MAX_TOKENS, StepOneObserver, hf_models
from lightning_order.checks.truncation import Pile, check_truncation
from lightning_order.rules import Violation


class Tiny(nn.Module):
    """nanoGPT-style: token and position embeddings, a head, its own cross-entropy."""

    def __init__(self, vocab: int = 50) -> None:
        super().__init__()
        self.wte, self.wpe, self.head = nn.Embedding(vocab, 8), nn.Embedding(64, 8), nn.Linear(8, vocab)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
        return nn.CrossEntropyLoss()(self.head(h).flatten(0, 1), y.flatten())


def test_the_observer_records_ids_and_targets_and_leaves_nothing_behind():
    model, original = Tiny(), functional.cross_entropy
    x = torch.randint(0, 50, (3, 20))
    observer = StepOneObserver(model)
    observer.install()
    try:
        model(x, torch.roll(x, -1, dims=1))
    finally:
        observer.remove()
    step = observer.observation()
    assert (step.ids == x.numpy()).all() and step.max_id == int(x.max()) and step.embedding_rows == 50
    assert (
        len(step.losses) == 1 and step.losses[0].targets.shape == (3, 20) and step.losses[0].empty_rows == 0
    )
    assert functional.cross_entropy is original
    assert all(not m._forward_pre_hooks for m in model.modules())
    model(x, x)  # after removal nothing is recorded any more
    assert len(observer.losses) == 1


def test_the_observer_copies_small_slices_only():
    model = Tiny(vocab=50)
    model.wpe = nn.Embedding(MAX_TOKENS * 2, 8)
    x = torch.randint(0, 50, (MAX_ROWS * 2, MAX_TOKENS + 10))
    observer = StepOneObserver(model)
    observer.install()
    try:
        model(x, x)
    finally:
        observer.remove()
    step = observer.observation()
    assert step.ids.shape == (MAX_ROWS, MAX_TOKENS) and step.losses[0].targets.shape == (MAX_ROWS, MAX_TOKENS)
    assert step.losses[0].rows == MAX_ROWS * 2


def test_an_id_beyond_the_embedding_is_reported_before_the_embedding_fails():
    seen = []

    def stop(step):
        seen.append(step)
        raise RuntimeError("reported")

    observer = StepOneObserver(Tiny(vocab=50), on_overflow=stop)
    observer.install()
    try:
        with pytest.raises(RuntimeError, match="reported"):
            observer.module(torch.full((2, 5), 60), torch.zeros(2, 5, dtype=torch.long))
    finally:
        observer.remove()
    assert seen[0].max_id == 60 and seen[0].embedding_rows == 50


def test_hf_models_are_found_nested_and_compiled_only_at_their_top():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=40, n_positions=16)
    inner = GPT2LMHeadModel(config)
    holder = nn.ModuleDict({"lm": inner, "other": nn.Linear(2, 2)})
    assert hf_models(holder) == [inner]  # not its inner GPT2Model too
    compiled = torch.compile(GPT2LMHeadModel(config), backend="eager")
    assert hf_models(nn.ModuleDict({"lm": compiled})) == [compiled]


@pytest.mark.parametrize(
    "violation, sampled",
    [
        (Violation("labels-shifted-twice", ("train",), "m"), True),
        (Violation("bos-mismatch", ("encode",), "m"), True),
        (Violation("attention-crosses-documents", ("train",), "m", details={"leak": 0.5}), False),
        # served positions against a recorded document_attention contradict a record: proof
        (Violation("attention-crosses-documents", ("train",), "m", details={"misplaced_rows": 3}), False),
        (Violation("vocab-changed-after-init", ("init_model",), "m"), False),
    ],
)
def test_only_guesses_from_sampled_rows_are_held_back_for_step_1(violation, sampled):
    assert sampled_only(violation) is sampled


def test_truncation_of_padded_rows_is_a_guess_and_before_packing_is_proof():
    pile = Pile(48, 10, 20)
    (padded,) = check_truncation(48, pile, padded=True)
    (packed,) = check_truncation(48, pile)
    assert sampled_only(padded) and padded.details["padded"] is True
    assert not sampled_only(packed) and "before packing" in packed.message


def test_a_loss_computed_in_chunks_of_flat_targets_is_seen_as_one():
    # litgpt's chunked_cross_entropy (#48): targets flattened, cut into 128-long pieces, one
    # cross_entropy(reduction="none") each. Each piece alone is no grid of rows: read together
    # they are the step's targets, and rows whose every target is ignored are counted.
    model = Tiny()
    x = torch.randint(0, 50, (4, 150))
    y = torch.roll(x, -1, dims=1)
    y[:2] = -100  # two rows whose prompt filled them: nothing to train on
    observer = StepOneObserver(model)
    observer.install()
    try:
        h = model.wte(x) + model.wpe(torch.arange(x.shape[1]) % 64)
        logits, targets = model.head(h).reshape(-1, 50), y.reshape(-1)
        pieces = [
            functional.cross_entropy(chunk, target, ignore_index=-100, reduction="none")
            for chunk, target in zip(logits.split(128), targets.split(128))
        ]
        torch.cat(pieces).sum()
    finally:
        observer.remove()
    (loss,) = observer.observation().losses
    assert loss.targets.shape[0] == 4 and loss.rows == 4 and loss.empty_rows == 2
