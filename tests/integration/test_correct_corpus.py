"""Issue #43, item 6: the correct real-world LM pipelines of tests/corpus_shapes.py are silent and train.

Each shape runs ``Trainer(callbacks=[OrderValidator()])`` with no other line of lightning_order
(the recorder below is the test's), two steps on CPU: no violation, no ``OrderWarning`` (but the one
the issue mandates for padded rows cut on purpose, :data:`corpus_shapes.WARNED`), a finite
loss at both steps, and weights the optimizer changed. A false alarm is a bug of the same weight as
a miss. Shapes stopped on today's main run as strict xfails naming the rule, so the fix of #43's
step-1 observation shows up as an XPASS. A second test checks, without a Trainer, that each shape
holds what makes it a trap for a guessing validator (pre-shifted labels, positions past the
vocabulary, rows ending in a newline, masked prompts, rows cut on purpose). The same shapes under
DDP: tests/distributed/test_correct_corpus_ddp.py.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from typing import Any

import pytest
import torch
from corpus_shapes import FALSE_ALARMS, SHAPES, WARNED, Losses, fit
from helpers import quiet_trainer

from lightning_order import OrderError, OrderValidator, OrderWarning

#: How main fails each shape it fails, as strict xfails: the fix of #43 shows up as an XPASS.
MARKS: dict[str, Any] = {
    **{
        name: pytest.mark.xfail(
            strict=True,
            raises=OrderError,
            reason=f"false alarm on main: {rule}; fixed by #43 step-1 observation",
        )
        for name, rule in FALSE_ALARMS.items()
    },
}


def shape_params() -> list[Any]:
    """One parameter per shape; main's false alarms and validator failures as strict xfails."""
    return [pytest.param(name, marks=MARKS.get(name, ())) for name in SHAPES]


@pytest.mark.parametrize("name", shape_params())
def test_a_correct_pipeline_is_silent_and_trains(name, tmp_path) -> None:
    data, module = SHAPES[name](tmp_path)
    before = [p.detach().clone() for p in module.parameters()]
    validator, losses = OrderValidator(), Losses()
    trainer = quiet_trainer(tmp_path, [validator, losses], max_steps=2, limit_val_batches=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(trainer, module, data)
    warned = [str(w.message) for w in caught if issubclass(w.category, OrderWarning)]
    assert len(warned) == (1 if name in WARNED else 0), warned
    assert [v.rule for v in validator.sampled_warnings] == WARNED.get(name, [])
    assert validator.violations == []
    assert trainer.global_step == 2 and len(losses.values) == 2
    assert all(math.isfinite(v) for v in losses.values), losses.values
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, module.parameters()))


# -- each shape is what it claims to be (no Trainer, no validator) ---------------------------------
def _train_loader(data: Any) -> Any:
    if isinstance(data, dict):
        return data["train_dataloaders"]
    data.setup("fit")
    return data.train_dataloader()


def _first(data: Any) -> Any:
    return next(iter(_train_loader(data)))


def _megatron_shift(data: Any) -> int:  # pre-shifted: labels are the next tokens, no -100
    batch = _first(data)
    assert torch.equal(batch["labels"][:, :-1], batch["input_ids"][:, 1:])
    return len(batch["labels"])


def _truncated_rows(data: Any) -> int:  # some rows cut at the context on purpose, every row keeps a target
    data.setup("fit")
    rows = [data.train_set[i] for i in range(len(data.train_set))]
    lengths = [len(r["input_ids"]) for r in rows]
    cut = max(lengths)
    assert sum(n == cut for n in lengths) > len(rows) // 4
    assert all(any(int(t) != -100 for t in r.get("labels", r["input_ids"])) for r in rows)
    return len(rows)


def _flattening(data: Any) -> int:  # one packed row whose positions run past the vocabulary
    batch = _first(data)
    assert batch["input_ids"].shape[0] == 1 and int(batch["position_ids"].max()) >= len(data.tokenizer)
    assert int(batch["input_ids"].max()) < len(data.tokenizer)
    return len(batch["input_ids"])


def _chat_ends(data: Any, full: bool) -> int:  # rows end "<|im_end|>\n"; end-of-turn labels kept
    batch, tokenizer = _first(data), data.tokenizer
    newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
    for ids, labels, mask in zip(batch["input_ids"], batch["labels"], batch["attention_mask"]):
        n = int(mask.sum())
        assert ids[n - 2] == tokenizer.eos_token_id and ids[n - 1 :].tolist()[: len(newline)] == newline
        assert labels[n - 2] == tokenizer.eos_token_id
        assert (labels[:n] != -100).all() if full else (labels[:n] == -100).any()
    return len(batch["input_ids"])


def _completion_only(data: Any) -> int:  # the prompt masked, the answer and its end of turn kept
    batch, tokenizer = _first(data), data.tokenizer
    end_of_turn = tokenizer.convert_tokens_to_ids("<|eot_id|>")
    for ids, labels, mask in zip(batch["input_ids"], batch["labels"], batch["attention_mask"]):
        n = int(mask.sum())
        assert labels[0] == -100 and (labels[:n] != -100).any() and ids[n - 1] == end_of_turn == labels[n - 1]
    return len(batch["input_ids"])


def _worker_shards(data: Any) -> int:  # two workers, each its own shards: every window read once
    loader = _train_loader(data)
    assert loader.num_workers == 2
    windows = Counter(tuple(x.tolist()) for xs, _ in loader for x in xs)
    # Real text repeats: a few windows are equal in content (2 of 1941 here), each read once per shard.
    assert windows == Counter(tuple(x.tolist()) for x, _ in data.train_set) and windows.total() > 1000
    return windows.total()


def _titan(data: Any) -> int:  # a stateful stream: a saved position resumes the same windows
    data.setup("fit")
    stream = data.train_set
    it = iter(stream)
    [next(it) for _ in range(3)]
    state, expected = stream.state_dict(), [next(it)[1] for _ in range(2)]
    again = type(stream)(stream.tokenizer, stream.texts)
    again.load_state_dict(state)
    resumed = iter(again)
    assert all(torch.equal(next(resumed)[1], y) for y in expected)
    return len(expected)


def _megatron_indexed(data: Any) -> int:
    batch = _first(data)
    assert torch.equal(batch["labels"][:, :-1], batch["tokens"][:, 1:]) and bool(batch["loss_mask"].all())
    return len(batch["labels"])


def _litgpt(data: Any) -> int:  # ids padded with 0, labels with -100, the prompt masked
    batch = _first(data)
    assert (batch["labels"][:, 0] == -100).all() and ((batch["labels"] != -100).sum(1) > 0).all()
    return len(batch["labels"])


def _bos_packed(data: Any) -> int:  # documents open with <s> and close with </s> inside the blocks
    bos, eos = data.tokenizer.bos_token_id, data.tokenizer.eos_token_id
    starts = 0
    for batch in _train_loader(data):  # a shuffled batch may hold no document end: read on until one does
        ids = batch["input_ids"]
        after_end = ids[:, 1:][ids[:, :-1] == eos]
        assert torch.equal(after_end, torch.full_like(after_end, bos))
        starts += len(after_end)
        if starts:
            break
    return starts  # document starts checked


CLAIMS = {
    "megatron-shift": _megatron_shift,
    "llama-padded-truncated": _truncated_rows,
    "flattening": _flattening,
    "chatml-eot": lambda data: _chat_ends(data, full=True),
    "chatml-completion-only": lambda data: _chat_ends(data, full=False),
    "llama3-completion-only": _completion_only,
    "megatron-indexed": _megatron_indexed,
    "torchtitan-stream": _titan,
    "sft-padded-truncated": _truncated_rows,
    "worker-shards": _worker_shards,
    "litgpt-sft": _litgpt,
    "llama-bos-packed": _bos_packed,
}


@pytest.mark.parametrize("name", list(CLAIMS))
def test_each_shape_is_the_pipeline_it_claims(name, tmp_path) -> None:
    data, _ = SHAPES[name](tmp_path)
    checked = CLAIMS[name](data)  # each claim asserts its property and returns how many rows it checked
    assert checked > 0, f"{name}: the claim checked nothing (an empty batch would pass it vacuously)"
