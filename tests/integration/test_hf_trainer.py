"""Issue #47 item 2: ``OrderCallback`` in the Hugging Face ``Trainer``, the fine-tuning bugs stopped before step 1's optimizer step.

A tiny ``LlamaForCausalLM`` built from a config on CPU (no hub), a Llama-style byte-level BPE
(``<s> $A </s>``) on real text (standard-library docstrings, :func:`plain_loop.documents`), one row
per docstring. Each planted bug is what fine-tuning recipes ship: ``DataCollatorForLanguageModeling(
mlm=False)`` with ``pad_token = eos_token`` (every ``</s>`` label masked), labels shifted in the data
(the model shifts again), a validation set drawn from train. Each stops before the first optimizer
step with the rule the Lightning callback gives, the weights as they were; the correct run (a pad
token of its own) is silent and trains.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import ROOT
from lm_tokenizers import llama_style_tokenizer
from plain_loop import documents
from torch.utils.data import Dataset, Subset

from lightning_order import OrderError, OrderWarning

transformers = pytest.importorskip("transformers")
from lightning_order.integrations.transformers import OrderCallback  # noqa: E402  (after the skip)

ROWS = 48
BLOCK = 32


@cache
def _texts() -> tuple[str, ...]:
    return tuple(d.splitlines()[0] for d in documents())


def tokenizer(pad_is_eos: bool) -> Any:
    """A ``PreTrainedTokenizerFast`` (``<s> $A </s>``): pad = eos as Llama recipes set it, or a ``<pad>`` of its own."""
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=llama_style_tokenizer(list(_texts())), bos_token="<s>", eos_token="</s>"
    )
    if pad_is_eos:
        hf.pad_token = hf.eos_token
    else:
        hf.add_special_tokens({"pad_token": "<pad>"})
    return hf


class Rows(Dataset):
    """One docstring summary per row (``input_ids``), or pre-shifted fixed windows (``labels`` = ids + 1)."""

    def __init__(self, rows: list[list[int]], preshift: bool = False) -> None:
        self.rows, self.preshift = rows, preshift

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        ids = self.rows[i]
        if self.preshift:  # labels[t] = ids[t + 1], as a Megatron-style loader prepares them
            return {"input_ids": torch.tensor(ids[:-1]), "labels": torch.tensor(ids[1:])}
        return {"input_ids": ids}


def build(bug: str | None, tmp_path: Path) -> tuple[Any, Any]:
    """``(trainer, callback)`` with ``bug`` planted (``None``: correct)."""
    tok = tokenizer(pad_is_eos=bug == "eos-label-masked")
    # Distinct rows: a correct split has no row on both sides by chance.
    encoded = [list(r) for r in dict.fromkeys(tuple(tok(t)["input_ids"]) for t in _texts())]
    if bug == "labels-shifted-twice":
        stream = [i for row in encoded for i in row]
        rows = [stream[s : s + BLOCK + 1] for s in range(0, len(stream) - BLOCK - 1, BLOCK)]
        train: Dataset = Rows(rows[:ROWS], preshift=True)
        collator = transformers.default_data_collator
        val: Dataset = Rows(rows[ROWS : ROWS + 8], preshift=True)
    else:
        train, val = Rows(encoded[:ROWS]), Rows(encoded[ROWS : ROWS + 16])
        collator = transformers.DataCollatorForLanguageModeling(tok, mlm=False)
    if bug == "train-val-overlap":
        val = Subset(train, range(0, ROWS, 4))
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        # A table sized before the pad token was added, or by hand: smaller than the tokenizer.
        vocab_size=len(tok) // 2 if bug == "init-before-data" else len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=128,
        pad_token_id=None if bug == "init-before-data" else tok.pad_token_id,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=8, learning_rate=1e-2,
        logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, seed=0,
    )  # fmt: skip
    callback = OrderCallback(eval_dataset=val)
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=train, eval_dataset=val, data_collator=collator,
        processing_class=tok, callbacks=[callback],
    )  # fmt: skip
    return trainer, callback


@pytest.mark.parametrize(
    "bug", ["eos-label-masked", "labels-shifted-twice", "train-val-overlap", "init-before-data"]
)
def test_planted_bug_stops_before_the_first_optimizer_step(bug: str, tmp_path: Path) -> None:
    trainer, _ = build(bug, tmp_path)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    with pytest.raises(OrderError) as err:
        trainer.train()
    assert err.value.rules[0] == bug
    # A table smaller than the tokenizer is also a vocabulary changed since the model was built.
    assert set(err.value.rules) <= {bug, "vocab-changed-after-init"}
    assert trainer.state.global_step == 0
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), "a weight moved before the error"
    # The observer is gone: cross_entropy is torch's again.
    assert torch.nn.functional.cross_entropy.__module__ == "torch.nn.functional"


def test_correct_run_is_silent_and_trains(tmp_path: Path) -> None:
    trainer, callback = build(None, tmp_path)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error", OrderWarning)
        trainer.train()
    assert callback.violations == [] and callback.guard is not None and callback.guard.checked
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert trainer.state.global_step == 4 and len(losses) == 4 and losses[-1] < losses[0]
    after = trainer.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_lightning_order_and_the_guard_import_neither_transformers_nor_fabric() -> None:
    code = (
        "import sys, lightning_order, lightning_order.guard, lightning_order.integrations\n"
        "from lightning_order import OrderGuard\n"
        "bad = sorted(m for m in sys.modules if m == 'transformers' or m.startswith(('transformers.', "
        "'lightning.fabric', 'lightning_fabric')))\n"
        "print(bad)\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout


def test_a_plain_loop_checked_and_trained_imports_neither_lightning_nor_transformers() -> None:
    """The guard's checks are the validator's core, which imports no Lightning: a plain loop that is
    checked (every phase before step 1, step 1 observed and judged) and trains never loads
    ``pytorch_lightning``, ``lightning.fabric`` or ``transformers``."""
    code = (
        "import sys\n"
        "sys.path.insert(0, 'examples')\n"
        "import plain_loop\n"
        "from lightning_order import OrderGuard\n"
        "run = plain_loop.build()\n"
        "guard = OrderGuard(run.model, run.train_loader, run.val_loader, tokenizer=run.tokenizer)\n"
        "losses = plain_loop.train(run, steps=3, guard=guard)\n"
        "assert len(losses) == 3 and guard.violations == [], guard.violations\n"
        "heavy = ('transformers', 'lightning', 'pytorch_lightning', 'lightning_fabric', 'torchmetrics')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "assert not bad, bad[:10]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout
