"""``lightning-order audit`` of language-model pipelines (#26): a supplied tokenizer shown as supplied,
the figures an LLM engineer reads (documents, duplicates, tokens, end-of-text, blocks, dropped
tokens), and a hand-written LM pipeline's checkpoint judged by ``LM_PIPELINE``.

The classification pipeline's audit and its exit codes: test_auditing.py.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import torch
from rich.console import Console
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from lightning_order import LM_PIPELINE, OrderedLMDataModule, StepLedger, record_step
from lightning_order.cli import audit
from lightning_order.cli.auditing import AUDIT_OK
from lightning_order.data.engine.storage import file_digest
from lightning_order.data.lm.figures import lm_figures
from lightning_order.ledger import CHECKPOINT_KEY

TINY = {"max_documents": 60, "vocab_size": 300, "block_size": 16}


def _audited(path: Path) -> tuple[int, str]:
    buffer = io.StringIO()
    code = audit(path, console=Console(file=buffer, width=200, soft_wrap=True))
    return code, buffer.getvalue()


def _row(out: str, step: str) -> str:
    return next(line for line in out.splitlines() if re.match(rf"│ {step}\s", line))


def _tokenizer_file(path: Path) -> Path:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(["Return the value of the attribute.", "A list of names."] * 20, trainer)
    tokenizer.save(str(path))
    return path


def test_a_supplied_tokenizer_is_shown_as_supplied_with_its_content_hash(tmp_path: Path) -> None:
    path = _tokenizer_file(tmp_path / "tokenizer.json")
    dm = OrderedLMDataModule(**TINY, tokenizer_file=str(path), cache_dir=str(tmp_path / "c"))
    dm.prepare_data()
    code, out = _audited(dm.cache_path)
    assert code == AUDIT_OK, out
    row = _row(out, "build_vocab")
    assert f"supplied (content hash {file_digest(path)[:12]})" in row and "train split" not in row
    assert f"tokenizer: supplied {path} (content hash {file_digest(path)[:12]})" in out


def test_audit_prints_the_lm_figures_from_the_ledger(tmp_path: Path) -> None:
    dm = OrderedLMDataModule(**TINY, cache_dir=str(tmp_path / "c"))
    dm.prepare_data()
    ledger = dm.ledger
    code, out = _audited(dm.cache_path)
    assert code == AUDIT_OK, out
    stat = {step: ledger.latest(step).stats for step in ("load", "dedup", "split", "encode", "pack")}
    assert "train split" in _row(out, "build_vocab")  # a trained tokenizer: fitted on the train split
    expected = [
        f"documents: {stat['load']['rows']:,} loaded",
        f"{stat['dedup']['rows']:,} after dedup; {stat['split']['train_rows']:,} train / {stat['split']['val_rows']:,} val",
        f"duplicates removed: {stat['dedup']['exact_removed']:,} exact, {stat['dedup']['near_removed']:,} near",
        f"tokens: {stat['encode']['train_tokens']:,} train / {stat['encode']['val_tokens']:,} val",
        f"end-of-text: {stat['encode']['eos_tokens']:,} tokens for {stat['encode']['documents']:,} documents; "
        f"{stat['pack']['eos_rate']:.2%}",
        f"blocks: {stat['pack']['train_blocks']:,} train / {stat['pack']['val_blocks']:,} val of 16 + 1 tokens",
        f"dropped tokens: {stat['pack']['train_dropped_tokens']:,} train / {stat['pack']['val_dropped_tokens']:,} val",
        "tokenizer: byte-level-bpe of",
    ]
    for text in expected:
        assert text in out, (text, out)


def test_figures_the_ledger_lacks_are_left_out() -> None:
    ledger = StepLedger()
    ledger.record("load", params={}, stats={"rows": 3})
    ledger.record("pack", params={"block_size": 8}, stats={"train_blocks": 2})
    assert lm_figures(ledger) == [("documents", "3 loaded"), ("blocks", "2 train / ? val of 8 + 1 tokens")]


class _HandWrittenLM:
    """A nanoGPT-style data preparation of one's own, each step recorded under ``LM_PIPELINE``."""

    @record_step("load", pipeline=LM_PIPELINE)
    def load(self) -> list[str]:
        return ["def f():\n    return 1\n", "the cat sat", "def f():\n    return 1\n", "a dog ran"]

    @record_step("clean", pipeline=LM_PIPELINE)
    def clean(self, docs: list[str]) -> list[str]:
        return [d.rstrip() for d in docs]

    @record_step("dedup", pipeline=LM_PIPELINE)
    def dedup(self, docs: list[str]) -> list[str]:
        return list(dict.fromkeys(docs))

    @record_step("split", pipeline=LM_PIPELINE)
    def split(self, docs: list[str]) -> tuple[list[str], list[str]]:
        return docs[:2], docs[2:]

    @record_step("build_vocab", pipeline=LM_PIPELINE)
    def build_vocab(self, train: list[str]) -> dict[str, int]:
        self.vocab = {c: i for i, c in enumerate(sorted(set("".join(train))))}
        return self.vocab

    @record_step("encode", pipeline=LM_PIPELINE, reads="vocab")  # what it read besides its argument
    def encode(self, docs: list[str]) -> list[list[int]]:
        return [[self.vocab.get(c, 0) for c in d] for d in docs]

    @record_step("pack", pipeline=LM_PIPELINE)
    def pack(self, ids: list[list[int]]) -> list[int]:
        return [t for d in ids for t in d]


@pytest.mark.parametrize("names_its_pipeline", [True, False], ids=["recorded", "older-ledger"])
def test_a_handwritten_lm_checkpoint_is_judged_by_the_lm_pipeline(
    tmp_path: Path, names_its_pipeline: bool
) -> None:
    data = _HandWrittenLM()
    train, _ = data.split(data.dedup(data.clean(data.load())))
    data.build_vocab(train)
    data.pack(data.encode(train))
    state = data.ledger.state_dict()
    assert state["info"].get("pipeline") == "lm"
    if not names_its_pipeline:  # a checkpoint saved before the pipeline was recorded: known by its steps
        del state["info"]["pipeline"]
    path = tmp_path / "last.ckpt"
    torch.save({CHECKPOINT_KEY: {"ledger": state}, "state_dict": {}}, path)
    code, out = _audited(path)
    assert code == AUDIT_OK, out
    assert "missing-step" not in out and "the order is correct" in out
    assert "rowwise" in _row(out, "dedup") and "apply" in _row(out, "pack")
