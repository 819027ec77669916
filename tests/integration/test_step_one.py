"""Issue #43, items 1-3: step 1 observed, the label and token rules read off it, only proof stops a run.

Each shape is a hand-written pipeline with ``Trainer(callbacks=[OrderValidator()])`` and no other
line of ours, on a tiny ``LlamaForCausalLM`` built from a config (hidden 32, one layer) and
made-up token ids (no tokenizer training): the correct pipelines the sampled checks stopped
(Megatron-style own loss over pre-shifted labels, ``DataCollatorWithFlattening`` on documents
longer than the vocabulary, ChatML with ``<|im_end|>`` then a newline) are silent and train; the
bugs that trained silently are stopped before the first optimizer step with the rule that names
them. The observer changes nothing the run trains on (bitwise), and leaves no hook behind.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from torch.nn import functional
from torch.utils.data import DataLoader

from lightning_order import OrderError, OrderValidator, OrderWarning

VOCAB = 64
EOS = 2
#: Tokens per packed block (inputs; the labels' extra token makes it 33).
BLOCK = 32


def llama(vocab: int = VOCAB, seed: int = 0) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=1024,
    )  # fmt: skip
    return LlamaForCausalLM(config)


class LM(pl.LightningModule):
    """A ``transformers`` model trained in one of the forms teams write.

    Args:
        model: the model (or a ``ModuleDict`` holding it under ``"lm"``, or a compiled one).
        form: ``"hf"``: ``model(**batch).loss``; ``"own-loss"``: its ``logits`` and a cross-entropy
            against ``batch["labels"]`` (Megatron / torchtitan); ``"tuple"``: ``model(input_ids=x, labels=y)``.
    """

    def __init__(self, model: torch.nn.Module, form: str = "hf") -> None:
        super().__init__()
        self.model, self.form = model, form

    def _net(self) -> Any:
        return self.model["lm"] if isinstance(self.model, torch.nn.ModuleDict) else self.model

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.form == "own-loss":
            logits = self._net()(input_ids=batch["input_ids"]).logits
            return functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
        if self.form == "tuple":
            x, y = batch
            return self._net()(input_ids=x, labels=y).loss
        return self._net()(**batch).loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Data(pl.LightningDataModule):
    """Items served through ``collate`` (no shuffling: the first batch is known)."""

    def __init__(
        self, items: list[Any], collate: Any = None, tokenizer: Any = None, batch_size: int = 4
    ) -> None:
        super().__init__()
        self.items, self.collate, self.batch_size = items, collate, batch_size
        if tokenizer is not None:
            self.tokenizer = tokenizer

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.items, self.batch_size, collate_fn=self.collate)


def blocks(rows: int = 16, width: int = BLOCK + 1, seed: int = 0) -> np.ndarray:
    """Made-up token ids (no repeats to speak of), end-of-text ids sprinkled in as document ends."""
    ids = np.random.default_rng(seed).integers(3, VOCAB, size=(rows, width))
    ids[:, 10] = EOS
    return ids


def preshifted(rows: int = 16) -> list[dict[str, torch.Tensor]]:
    """``input_ids = tokens[:-1]``, ``labels = tokens[1:]``: Megatron / torchtitan / nanoGPT blocks."""
    return [{"input_ids": torch.tensor(b[:-1]), "labels": torch.tensor(b[1:])} for b in blocks(rows)]


def fit(module: LM, dm: Data, **options: Any) -> tuple[OrderError | None, int, OrderValidator]:
    validator = OrderValidator()
    trainer = quiet_trainer(
        None, [validator], max_steps=options.pop("max_steps", 1), limit_val_batches=0, **options
    )
    try:
        trainer.fit(module, dm)
    except OrderError as err:
        return err, trainer.global_step, validator
    return None, trainer.global_step, validator


def stack(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {k: torch.stack([i[k] for i in items]) for k in items[0]}


def test_megatron_style_own_loss_on_pre_shifted_labels_is_silent_and_trains():
    """False alarm 1 of #43: pre-shifted labels against an HF model's logits in the step's own
    cross-entropy are correct (offset 1 observed); the sampled guess said labels-shifted-twice."""
    error, steps, validator = fit(LM(llama(), "own-loss"), Data(preshifted(), stack))
    assert error is None and steps == 1
    assert validator.violations == [] and validator.sampled_warnings == []


@pytest.mark.parametrize(
    "shape",
    ["dict-into-hf", "module-dict", "tuple-as-labels"],
)
def test_pre_shifted_labels_into_a_model_that_shifts_them_are_stopped(shape):
    """HF model fed pre-shifted labels: nested in a ModuleDict, or (x, y) tuples passed as labels=y."""
    if shape == "tuple-as-labels":
        items = [(i["input_ids"], i["labels"]) for i in preshifted()]
        module, dm = LM(llama(), "tuple"), Data(items)
    else:
        model = torch.nn.ModuleDict({"lm": llama()}) if shape == "module-dict" else llama()
        module, dm = LM(model), Data(preshifted(), stack)
    error, steps, _ = fit(module, dm)
    assert error is not None and error.rules == ["labels-shifted-twice"] and steps == 0
    assert "input_ids[t + 2]" in str(error) and "LlamaForCausalLM got labels=" in str(error)


@pytest.mark.slow
def test_a_compiled_hf_model_fed_pre_shifted_labels_is_stopped():
    # Dynamo captures the graph as in production; inductor's CPU code generation takes minutes here.
    compiled = torch.compile(llama(), backend="eager")
    started = time.perf_counter()
    error, steps, _ = fit(LM(compiled), Data(preshifted(), stack))
    assert error is not None and error.rules == ["labels-shifted-twice"] and steps == 0, error
    assert time.perf_counter() - started < 120


# -- supervised fine-tuning rows: completion-only labels -------------------------------------------
PROMPT, ANSWER = 6, 6


def sft_rows(rows: int = 8, prompt: int = PROMPT, long_every: int = 0) -> list[list[int]]:
    """``prompt`` ids, the response marker (5, 6), an answer and the end-of-text id; every
    ``long_every``-th row has a prompt three times longer."""
    rng = np.random.default_rng(1)
    out = []
    for r in range(rows):
        length = prompt * 3 if long_every and r % long_every == 0 else prompt
        out.append([*rng.integers(10, VOCAB, length), 5, 6, *rng.integers(10, VOCAB, ANSWER), EOS])
    return out


def completion_only(template: list[int], max_length: int | None = None) -> Any:
    """A completion-only collator (TRL's ``DataCollatorForCompletionOnlyLM`` logic): labels -100 up to
    and including the response ``template``; a row where it is not found keeps no label at all."""

    def collate(rows: list[list[int]]) -> dict[str, torch.Tensor]:
        rows = [r[:max_length] if max_length else r for r in rows]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), 0)
        mask, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
        for n, row in enumerate(rows):
            ids[n, : len(row)], mask[n, : len(row)] = torch.tensor(row), 1
            at = next((i for i in range(len(row)) if row[i : i + len(template)] == template), None)
            if at is not None:
                start = at + len(template)
                labels[n, start : len(row)] = torch.tensor(row[start:])
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    return collate


def test_a_completion_only_collator_whose_template_never_matches_is_stopped():
    """The response template's ids taken with a BOS (1) never match the rows: every label is -100."""
    error, steps, _ = fit(LM(llama()), Data(sft_rows(), completion_only([1, 5, 6])))
    assert error is not None and error.rules == ["rows-without-target"] and steps == 0
    assert "4 of 4 rows" in str(error)


def test_prompts_longer_than_max_length_are_stopped():
    """Rows cut to 16 tokens: the long prompts' answers are cut away, those rows keep no target."""
    dm = Data(sft_rows(long_every=2), completion_only([5, 6], max_length=16))
    error, steps, _ = fit(LM(llama()), dm)
    assert error is not None and error.rules == ["rows-without-target"] and steps == 0
    assert "2 of 4 rows" in str(error)


def test_a_completion_only_collator_that_matches_is_silent():
    error, steps, validator = fit(LM(llama()), Data(sft_rows(), completion_only([5, 6])))
    assert error is None and steps == 1 and validator.violations == []


# -- flattened rows: documents packed into one row ---------------------------------------------------
def documents(n: int = 4, length: int = 100) -> list[dict[str, list[int]]]:
    """Documents longer than the vocabulary (100 tokens, 64 ids), each ending with end-of-text."""
    rng = np.random.default_rng(2)
    return [{"input_ids": [*rng.integers(3, VOCAB, length - 1).tolist(), EOS]} for _ in range(n)]


def flattening(return_position_ids: bool = True) -> Any:
    from transformers import DataCollatorWithFlattening

    return DataCollatorWithFlattening(return_position_ids=return_position_ids, return_tensors="pt")


def test_data_collator_with_flattening_on_documents_longer_than_the_vocabulary_is_silent():
    """False alarm 3 of #43: its position_ids (up to 99) are no token ids (64 rows)."""
    error, steps, validator = fit(LM(llama()), Data(documents(), flattening()))
    assert error is None and steps == 1 and validator.violations == []


def _never_restarting(features: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
    """A hand-written flattening collator: labels kept apart like DataCollatorWithFlattening's, but
    position_ids counting on across documents."""
    ids = [t for f in features for t in f["input_ids"]]
    labels = [t for f in features for t in [-100, *f["input_ids"][1:]]]
    return {
        "input_ids": torch.tensor([ids]),
        "labels": torch.tensor([labels]),
        "position_ids": torch.arange(len(ids)).unsqueeze(0),
    }


@pytest.mark.parametrize("collate", ["never-restarting", "return_position_ids=False"])
def test_flattened_documents_whose_positions_cross_documents_are_stopped(collate):
    chosen = _never_restarting if collate == "never-restarting" else flattening(return_position_ids=False)
    error, steps, _ = fit(LM(llama()), Data(documents(), chosen))
    assert error is not None and error.rules == ["attention-crosses-documents"] and steps == 0
    expected = "position_ids that do not restart" if collate == "never-restarting" else "no position_ids"
    assert expected in str(error) and "3 document starts" in str(error)


# -- ChatML: <|im_end|> then a newline, the end-of-turn label kept ------------------------------------
def chatml_tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "user", "assistant", "\n", *[f"w{i}" for i in range(40)]]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    return tokenizer


def chatml_rows(tokenizer: Any, rows: int = 16) -> list[tuple[list[int], int]]:
    """``(ids, prompt length)``: a user turn and an assistant turn, each closed by ``<|im_end|>`` and a newline."""
    ids = tokenizer.convert_tokens_to_ids
    start, end, newline = ids("<|im_start|>"), ids("<|im_end|>"), ids("\n")
    rng = np.random.default_rng(3)
    out = []
    for r in range(rows):
        words = [ids(f"w{i}") for i in rng.integers(0, 40, 4 + r % 5)]
        prompt = [start, ids("user"), newline, *words[:2], end, newline, start, ids("assistant"), newline]
        out.append(([*prompt, *words[2:], end, newline], len(prompt)))
    return out


def chatml_collate(pad: int) -> Any:
    def collate(rows: list[tuple[list[int], int]]) -> dict[str, torch.Tensor]:
        width = max(len(r) for r, _ in rows)
        ids = torch.full((len(rows), width), pad)
        mask, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
        for n, (row, prompt) in enumerate(rows):
            ids[n, : len(row)], mask[n, : len(row)] = torch.tensor(row), 1
            labels[n, prompt : len(row)] = torch.tensor(
                row[prompt:]
            )  # the answer, <|im_end|> and the newline
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    return collate


def test_chatml_rows_ending_with_a_newline_after_the_kept_end_of_turn_are_silent():
    """False alarm 4 of #43: the last attended token is the newline after <|im_end|>, whose label is kept."""
    tokenizer = chatml_tokenizer()
    dm = Data(chatml_rows(tokenizer), chatml_collate(tokenizer.pad_token_id), tokenizer, batch_size=8)
    error, steps, validator = fit(LM(llama(len(tokenizer))), dm)
    assert error is None and steps == 1
    assert validator.violations == [] and validator.sampled_warnings == []


# -- the observer changes nothing, and leaves nothing behind ----------------------------------------
class Recorder(pl.Callback):
    """Every step's batch, loss, gradients and random state."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.seen.append({"batch": {k: v.clone() for k, v in batch.items()}, "rng": torch.get_rng_state()})

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        grads = {n: p.grad.clone() for n, p in pl_module.named_parameters() if p.grad is not None}
        self.seen[-1]["grads"] = grads

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.seen[-1]["loss"] = outputs["loss"].detach().clone()


def _gpt2_with_dropout() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=VOCAB, n_positions=64))


def _recorded(with_validator: bool) -> list[dict[str, Any]]:
    pl.seed_everything(0, verbose=False)
    recorder = Recorder()
    callbacks = [OrderValidator(), recorder] if with_validator else [recorder]
    items = [{**i, "labels": i["input_ids"]} for i in preshifted()]  # labels = inputs: the model shifts
    dm = Data(items, stack)
    dm.train_dataloader = lambda: DataLoader(items, 4, shuffle=True, collate_fn=stack)  # type: ignore[method-assign]
    quiet_trainer(None, callbacks, max_steps=3, limit_val_batches=0).fit(LM(_gpt2_with_dropout()), dm)
    return recorder.seen


def test_the_observed_run_trains_bitwise_as_the_unobserved_one():
    """Dropout on, shuffled loader: batches, losses, gradients and RNG states identical over 3 steps."""
    plain, observed = _recorded(False), _recorded(True)
    assert len(plain) == len(observed) == 3
    for a, b in zip(plain, observed):
        assert all(torch.equal(a["batch"][k], b["batch"][k]) for k in a["batch"])
        assert torch.equal(a["rng"], b["rng"]) and torch.equal(a["loss"], b["loss"])
        assert a["grads"].keys() == b["grads"].keys()
        assert all(torch.equal(a["grads"][n], b["grads"][n]) for n in a["grads"])


@pytest.mark.parametrize("ends", ["judged", "stopped"])
def test_no_hook_and_no_wrapped_cross_entropy_outlive_step_1(ends):
    original = functional.cross_entropy
    model = llama()
    items = preshifted() if ends == "stopped" else [{**i, "labels": i["input_ids"]} for i in preshifted()]
    error, steps, _ = fit(LM(model), Data(items, stack), max_steps=2)
    assert (error is not None) == (ends == "stopped") and steps == (0 if error else 2)
    assert functional.cross_entropy is original
    assert all(not m._forward_pre_hooks for m in model.modules())


def test_a_sampled_guess_that_step_1_cannot_decide_only_warns():
    """Pre-shifted dict labels into an HF model whose step computes its loss from other keys: the
    sampled rows suggest labels-shifted-twice, no loss tied to the ids is seen, so it warns."""

    class Ignores(LM):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.model(input_ids=batch["input_ids"]).logits.float().pow(2).mean()

    with pytest.warns(OrderWarning, match="labels-shifted-twice"):
        error, steps, validator = fit(Ignores(llama()), Data(preshifted(), stack))
    assert error is None and steps == 1
    assert [v.rule for v in validator.sampled_warnings] == ["labels-shifted-twice"]


class Manual(LM):
    """Manual optimization: the optimizer step is taken inside ``training_step``."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__(model, "tuple")
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        optimizer = self.optimizers()
        self.manual_backward(super().training_step(batch, batch_idx))
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize("loop", ["gradient-accumulation", "manual-optimization"])
def test_step_1_is_judged_before_any_optimizer_step_in_other_loops(loop):
    items = [(i["input_ids"], i["labels"]) for i in preshifted()]
    model = llama()
    before = [p.detach().clone() for p in model.parameters()]
    if loop == "manual-optimization":
        error, steps, _ = fit(Manual(model), Data(items))
    else:
        error, steps, _ = fit(LM(model, "tuple"), Data(items), accumulate_grad_batches=2)
    assert error is not None and error.rules == ["labels-shifted-twice"] and steps == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # no optimizer step taken
