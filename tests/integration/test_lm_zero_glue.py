"""Zero glue on a hand-written nanoGPT-style LM pipeline (#26): ``OrderValidator()`` and nothing else.

The datamodule and model are tests/nanogpt.py's: ``train.bin`` / ``val.bin`` memmaps read as
random windows, ``dm.tokenizer`` a ``transformers`` ``PreTrainedTokenizerFast``, a tiny
``GPT2LMHeadModel`` built from a config. Each classic bug is caught before step 1 with its
rule code; the correct pipeline is silent. The same under 2-rank DDP:
tests/distributed/test_lm_zero_glue_ddp.py (correct, pad-added, per-rank tokenizer).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import ROOT, quiet_trainer
from nanogpt import BLOCK, BinData, LatePadData, PackedSplitData, PadUsedData, TinyGPT, corpus, prepare
from torch.utils.data import DataLoader

from lightning_order import OrderError, OrderValidator


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One offline preparation per kind of data: correct, without end-of-text, with 19 % twins."""
    root = tmp_path_factory.mktemp("nanogpt")
    variants = {
        "correct": {},
        "no-eos": {"eos": False},
        "twins": {"twins": 0.19},
        "bos-first": {"eos": False, "bos": True},  # Llama's add_bos_token: <s> opens each, none ends
        "small": {"documents": 360},  # #37: stopped with "exact duplicates straddle the split"
        "footers": {"documents": 360, "footers": 0.3},  # shared phrases longer than a window
        "twins-5": {"twins": 0.05},
    }
    for name, options in variants.items():
        prepare(root / name, **options)
    return {name: root / name for name in variants}


def _fit(dm: BinData, model: TinyGPT) -> tuple[OrderValidator, OrderError | None, int]:
    validator = OrderValidator()
    trainer = quiet_trainer(None, [validator], max_steps=1, limit_val_batches=1)
    try:
        trainer.fit(model, dm)
    except OrderError as err:
        return validator, err, trainer.global_step
    return validator, None, trainer.global_step


def test_the_correct_pipeline_is_silent_and_trains(folders):
    dm = BinData(folders["correct"])
    dm.setup("fit")
    validator, error, steps = _fit(dm, TinyGPT(len(dm.tokenizer)))
    assert error is None and validator.violations == [] and steps == 1


@pytest.mark.parametrize("data_cls", [LatePadData, PadUsedData], ids=["pad-added", "pad-used"])
def test_a_pad_token_added_after_the_model_was_sized_is_caught_with_the_hf_fix(folders, data_cls):
    dm = data_cls(folders["correct"])
    dm.setup("fit")
    model = TinyGPT(dm.tokenizer.vocab_size)  # vocab_size leaves added tokens out: 512 rows, 513 tokens
    _, error, steps = _fit(dm, model)
    assert error is not None and steps == 0
    # The pad id in the batches (pad-used) is also beyond the table: init-before-data, as before #26.
    assert error.rules == ["vocab-changed-after-init"] or error.rules == [
        "init-before-data",
        "vocab-changed-after-init",
    ]
    assert "513" in str(error) and all("resize_token_embeddings" in v.fix for v in error.violations)


def test_a_token_added_after_the_model_was_built_is_caught(folders):
    dm = BinData(folders["correct"])
    dm.setup("fit")
    model = TinyGPT(len(dm.tokenizer))
    dm.tokenizer.add_special_tokens({"pad_token": "<pad>"})  # after the model: no resize
    _, error, steps = _fit(dm, model)
    assert error is not None and error.rules == ["vocab-changed-after-init"] and steps == 0


def test_a_token_added_after_the_validators_setup_is_caught_by_fingerprint(folders):
    import pytorch_lightning as pl

    class AddsToken(pl.Callback):  # runs before the validator's on_fit_start: after its setup
        def on_fit_start(self, trainer, pl_module):
            trainer.datamodule.tokenizer.add_tokens(["<late>"])

    dm = BinData(folders["correct"])
    dm.setup("fit")
    model = TinyGPT(len(dm.tokenizer) + 8)  # rows to spare: only the fingerprint can tell
    validator = OrderValidator()
    trainer = quiet_trainer(None, [AddsToken(), validator], max_steps=1, limit_val_batches=0)
    with pytest.raises(OrderError) as caught:
        trainer.fit(model, dm)
    assert caught.value.rules == ["vocab-changed-after-init"] and trainer.global_step == 0
    assert "between the validator's setup and the model check" in str(caught.value)


def test_blocks_without_end_of_text_are_caught_at_block_size_32(folders):
    dm = BinData(folders["no-eos"])
    dm.setup("fit")
    assert dm.tokenizer.eos_token_id is None  # the id comes from the tokenizer's declared special token
    _, error, steps = _fit(dm, TinyGPT(len(dm.tokenizer)))
    assert error is not None and error.rules == ["pack-without-eos"] and steps == 0
    assert "512 sampled blocks" in str(error) and "interval" in str(error)


def test_a_bos_first_packing_without_end_of_text_is_silent_and_trains(folders):
    dm = BinData(folders["bos-first"])
    dm.setup("fit")
    assert dm.tokenizer.convert_tokens_to_ids("<s>") in set(dm.train_set.data[:200].tolist())
    validator, error, steps = _fit(dm, TinyGPT(len(dm.tokenizer)))
    assert error is None and validator.violations == [] and steps == 1


def test_validation_documents_with_a_train_twin_are_caught(folders):
    dm = BinData(folders["twins"])
    dm.setup("fit")
    _, error, steps = _fit(dm, TinyGPT(len(dm.tokenizer)))
    assert error is not None and error.rules == ["train-val-overlap"] and steps == 0
    estimate = error.violations[0].details["estimate"]
    assert estimate["hits"] >= estimate["min_hits"] and estimate["interval"][0] > 0.01


@pytest.mark.parametrize("variant", ["small", "footers"])
def test_a_correct_pipeline_whose_documents_share_phrases_is_silent(folders, variant):
    # 13 % of the footers corpus's validation windows have an identical train window (a shared
    # ~80-token footer); no validation document is in train.
    dm = BinData(folders[variant])
    dm.setup("fit")
    validator, error, steps = _fit(dm, TinyGPT(len(dm.tokenizer)))
    assert error is None and validator.violations == [] and steps == 1
    assert validator.evidence["overlap"] == "token-stream"  # every window against all train tokens


def test_five_percent_twin_documents_are_caught_from_every_window(folders):
    dm = BinData(folders["twins-5"])
    dm.setup("fit")
    _, error, steps = _fit(dm, TinyGPT(len(dm.tokenizer)))
    assert error is not None and error.rules == ["train-val-overlap"] and steps == 0
    (violation,) = error.violations
    assert violation.details["estimate"]["exact"] and violation.details["rate"] > 0.01
    assert "whole documents that the train split holds too" in violation.message


class _Stream(torch.utils.data.IterableDataset):
    """A torchtitan-style stream of ``(x, y)`` windows, ``stride`` tokens apart; ``plant`` replaces
    its fourth window by another array's window (a phrase that recurs across documents)."""

    def __init__(self, tokens: np.ndarray, stride: int = 8, plant: np.ndarray | None = None) -> None:
        self.tokens, self.stride, self.plant = np.asarray(tokens, dtype=np.int64), stride, plant

    def __iter__(self):
        for n, start in enumerate(range(0, self.tokens.size - BLOCK - 1, self.stride)):
            chunk = self.tokens[start : start + BLOCK + 1] if n != 3 or self.plant is None else self.plant
            yield torch.from_numpy(chunk[:-1].copy()), torch.from_numpy(chunk[1:].copy())


def test_one_window_in_512_of_an_iterable_split_is_a_sample_not_a_leak(folders):
    # #37 item 9: one window of a stream replaced by a train window (a phrase recurring across
    # documents) is no leak. #43 item 4: the train stream is read as tokens (evidence stream-read);
    # the planted window holds no whole validation document, so the correct pipeline trains.
    class StreamData(BinData):
        def setup(self, stage: str) -> None:
            super().setup(stage)
            train = np.asarray(self.train_set.data, dtype=np.int64)
            self.train_stream = _Stream(train)
            self.val_stream = _Stream(np.asarray(self.val_set.data), plant=train[800 : 800 + BLOCK + 1])

        def train_dataloader(self) -> DataLoader:
            return DataLoader(self.train_stream, batch_size=self.batch_size)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(self.val_stream, batch_size=self.batch_size)

    dm = StreamData(folders["correct"])
    dm.setup("fit")
    validator, error, steps = _fit(dm, TinyGPT(len(dm.tokenizer)))
    assert error is None and validator.violations == [] and steps == 1
    assert validator.evidence["overlap"] == "stream-read"


@pytest.mark.parametrize(
    "stride", [1, BLOCK, BLOCK + 1], ids=["every-window", "nanogpt-blocks", "packed-blocks"]
)
def test_a_split_after_packing_is_caught(folders, stride):
    # #37 item 4: random_split of the windows (or blocks) of one stream of every document; #43 item 4:
    # nanoGPT's blocks (x = data[i:i + block_size], i a multiple of block_size) too.
    dm = PackedSplitData(folders["correct"], stride=stride)
    dm.setup("fit")
    validator, error, steps = _fit(dm, TinyGPT(len(dm.tokenizer)))
    assert error is not None and error.rules == ["train-val-overlap"] and steps == 0
    assert validator.evidence["overlap"] == "token-subsets" and "after packing" in str(error)
    assert error.violations[0].details["estimate"]["rate"] > 0.9


# -- docs/lm.md "Your own LM pipeline", run as written ---------------------------------------------
@pytest.fixture(scope="module")
def example() -> dict:
    """The python block of docs/lm.md's "Your own LM pipeline" section, executed as a module."""
    text = (ROOT / "docs" / "lm.md").read_text()
    section = text.split("## Your own LM pipeline", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    namespace: dict = {"__name__": "lm_docs_example"}
    exec(compile(block, "docs/lm.md", "exec"), namespace)
    return namespace


def test_the_docs_example_is_silent_cold_and_warm_and_keeps_its_ledger(example, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example's Trainer logs to ./lightning_logs
    texts = corpus(300)
    for _ in ("cold", "warm"):
        dm, trainer = example["train"](tmp_path / "data", texts)
        (validator,) = [c for c in trainer.callbacks if isinstance(c, OrderValidator)]
        assert validator.violations == [] and trainer.global_step == 1
        assert dm.ledger.info["pipeline"] == "lm"
        assert dm.ledger.steps()[:6] == ["load", "clean", "dedup", "split", "build_vocab", "encode"]
        assert set(validator.fingerprints) == {"split", "vocab"}  # kept in checkpoints for resume
        assert validator.evidence["overlap"] == "key-hash"  # document-level, exact


def test_the_docs_example_refuses_a_resume_on_files_prepared_again(example, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dm, trainer = example["train"](tmp_path / "data", corpus(300))
    trainer.save_checkpoint(tmp_path / "step1.ckpt")
    (tmp_path / "data" / "manifest.json").unlink()
    example["Prepare"](tmp_path / "data", corpus(300, seed=1)).run()  # same sizes, other corpus
    dm = example["BinData"](tmp_path / "data")
    dm.setup("fit")
    trainer = quiet_trainer(tmp_path, [OrderValidator()], max_steps=2, limit_val_batches=0)
    with pytest.raises(OrderError) as caught:
        trainer.fit(example["TinyGPT"](len(dm.tokenizer)), dm, ckpt_path=tmp_path / "step1.ckpt")
    assert caught.value.rules == ["resume-data-changed"]  # before the weights are restored


def test_the_docs_example_catches_a_token_added_after_the_model(example, tmp_path):
    class LatePad(example["BinData"]):
        def setup(self, stage):
            super().setup(stage)
            self.tokenizer.add_special_tokens({"pad_token": "<pad>"})  # after build_vocab recorded it

    example["Prepare"](tmp_path / "data", corpus(300)).run()
    dm = LatePad(tmp_path / "data")
    dm.setup("fit")
    model = example["TinyGPT"](dm.tokenizer.vocab_size)  # added tokens left out: 512 rows, 513 tokens
    _, error, steps = _fit(dm, model)
    assert error is not None and error.rules == ["vocab-changed-after-init"] and steps == 0
    assert "resize_token_embeddings" in error.violations[0].fix


def test_the_docs_example_ledger_sees_a_tokenizer_retrained_at_the_same_size(example, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    example["Prepare"](tmp_path / "data", corpus(300)).run()
    example["Prepare"](tmp_path / "other", corpus(300, seed=1)).run()
    shutil.copy(tmp_path / "other" / "tokenizer.json", tmp_path / "data" / "tokenizer.json")
    with pytest.raises(OrderError) as caught:
        example["train"](tmp_path / "data", [])  # a warm cache: nothing is prepared again
    assert "vocab-changed-after-init" in caught.value.rules


def test_the_docs_glue_encoding_then_packing_each_split_in_turn_is_silent(example, tmp_path):
    # #37: the docs' ledger lines, one split encoded and packed after the other, gave missing-step.
    from lightning_order import LM_PIPELINE, record_step

    class PerSplit(example["Prepare"]):
        @record_step("encode", pipeline=LM_PIPELINE, params={"eos": True})
        def encode_split(self, tokenizer, docs):
            eos = tokenizer.token_to_id(example["EOS"])
            return np.asarray(
                [t for e in tokenizer.encode_batch(docs) for t in (*e.ids, eos)], dtype=np.uint16
            )

        @record_step("pack", pipeline=LM_PIPELINE)
        def pack(self, ids, name):
            ids.tofile(self.folder / f"{name}.bin")
            return ids

        def run(self):
            train, val = self.split(self.dedup(self.clean(self.load())))
            tokenizer = self.build_vocab(train)
            for name, docs in (("train", train), ("val", val)):
                self.pack(self.encode_split(tokenizer, docs), name)
            self.ledger.save(self.folder)

    PerSplit(tmp_path, corpus()).run()
    dm = example["BinData"](tmp_path)
    dm.setup("fit")
    assert dm.ledger.steps()[-4:] == ["encode", "pack", "encode", "pack"] and dm.ledger.steps()[0] == "load"
    validator, error, steps = _fit(dm, example["TinyGPT"](len(dm.tokenizer)))
    assert error is None and validator.violations == [] and steps == 1
