"""The round trip of issue #34: a Llama-style tokenizer folder in, a trained model and its tokenizer out.

The test writes a tokenizer folder as a team has it (``<s>``, ``</s>``, post-processor
``<s> $A </s>``, saved with ``PreTrainedTokenizerFast.save_pretrained``), prepares with it, trains 3
steps (``OrderedCausalLM``, and a tiny ``LlamaForCausalLM`` with ``batch_format="hf"``) with a
checkpoint, and loads the tokenizer saved beside the checkpoint with ``AutoTokenizer``: it encodes a
prompt exactly as the blocks begin a document, and the checkpoint loads with ``weights_only=True``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import fsspec
import pytest
import pytorch_lightning as pl
import torch
from helpers import HFWrapper, quiet_trainer, tiny_llama
from lm_tokenizers import document_starts, llama_style_folder, prompt_of
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_order import OrderedCausalLM, OrderedLMDataModule, OrderValidator, OutputWarning
from lightning_order.data.lm.corpus import stdlib_corpus

transformers = pytest.importorskip("transformers")

SMALL = {"vocab_size": 300, "block_size": 16, "batch_size": 8, "num_proc": 1, "max_documents": 200}


def _ordered(dm: OrderedLMDataModule) -> pl.LightningModule:
    return OrderedCausalLM(**dm.dims, n_layer=1, n_head=2, n_embd=32)


def _llama(dm: OrderedLMDataModule) -> pl.LightningModule:
    config = {"bos_token_id": dm.hf_tokenizer.bos_token_id, "eos_token_id": dm.eos_token_id}
    return HFWrapper(tiny_llama(dm, **config))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return llama_style_folder(tmp_path_factory.mktemp("round_trip") / "llama", stdlib_corpus(200))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "form"),
    [("OrderedCausalLM", "folder"), ("LlamaForCausalLM", "folder"), ("OrderedCausalLM", "object")],
)
def test_the_tokenizer_saved_beside_the_checkpoint_encodes_a_prompt_as_the_blocks(
    tmp_path: Path, folder: Path, model: str, form: str
) -> None:
    given: Any = str(folder) if form == "folder" else transformers.AutoTokenizer.from_pretrained(str(folder))
    dm = OrderedLMDataModule(cache_dir=str(tmp_path / "cache"), tokenizer=given, eos_token="</s>", **SMALL)
    module = {"OrderedCausalLM": _ordered, "LlamaForCausalLM": _llama}[model](dm)
    checkpoints = tmp_path / "checkpoints"
    every = ModelCheckpoint(dirpath=str(checkpoints), every_n_train_steps=3, save_top_k=-1)
    validator = OrderValidator()
    trainer = quiet_trainer(
        tmp_path, [validator, every], max_steps=3, limit_val_batches=0, enable_checkpointing=True
    )
    trainer.fit(module, dm)
    assert trainer.global_step == 3 and validator.violations == []
    assert dm.batch_format == ("hf" if model == "LlamaForCausalLM" else "shifted")
    (checkpoint,) = checkpoints.glob("*.ckpt")
    torch.load(checkpoint, weights_only=True)  # the hyperparameters hold no tokenizer object

    loaded = transformers.AutoTokenizer.from_pretrained(str(checkpoints / "tokenizer"))
    assert (loaded.bos_token, loaded.eos_token, len(loaded)) == ("<s>", "</s>", dm.vocab_size)
    stream = dm.blocks("val").reshape(-1)
    documents = dm.documents("val")
    # The first document of the split starts the stream; the next ones start after an end-of-text id
    # while they stay in the first partition (pack moves each partition's tail to the end).
    first = dm.ledger.info["documents"]["val"][0]
    for index, start in enumerate(document_starts(stream, dm.eos_token_id, min(first, 3))):
        prompt = prompt_of(documents[index])
        ids = loaded(prompt).input_ids
        assert ids[0] == loaded.bos_token_id and ids[-1] != loaded.eos_token_id
        assert stream[start : start + len(ids)].tolist() == ids, index
        assert ids == dm.hf_tokenizer(prompt).input_ids == dm.tokenizer.encode(prompt).ids


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> OrderedLMDataModule:
    return OrderedLMDataModule(cache_dir=str(tmp_path_factory.mktemp("beside")), num_partitions=1, **SMALL)


@pytest.mark.parametrize("dirpath", ["memory", "local, a file at tokenizer"])
def test_every_checkpoint_of_a_fit_leaves_what_is_not_ours_and_writes_where_the_checkpoints_go(
    tmp_path: Path, trained: OrderedLMDataModule, dirpath: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#42 items 1 and 9 through a real fit checkpointing at every step: a ``memory://`` dirpath
    (as ``s3://``) gets the tokenizer in its own storage, and a user's file at ``tokenizer`` is left
    as it is at the second checkpoint too (no ``NotADirectoryError``), with a warning."""
    monkeypatch.chdir(tmp_path)
    fs = fsspec.filesystem("memory")
    where = f"memory://{tmp_path.name}/ckpt" if dirpath == "memory" else str(tmp_path / "ckpt")
    if dirpath != "memory":
        (tmp_path / "ckpt").mkdir()
        (tmp_path / "ckpt" / "tokenizer").write_text("my notes")
    every = ModelCheckpoint(dirpath=where, every_n_train_steps=1, save_top_k=-1)
    trainer = quiet_trainer(None, [every], max_steps=2, limit_val_batches=0, enable_checkpointing=True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(_ordered(trained), trained)
        ours = [str(w.message) for w in caught if issubclass(w.category, OutputWarning)]
        assert trainer.global_step == 2
        if dirpath == "memory":
            assert ours == [] and len(fs.glob(f"{where}/*.ckpt")) == 2
            assert (
                fs.cat(f"{where}/tokenizer/tokenizer.json") == trained.tokenizer.to_str(pretty=True).encode()
            )
            assert not (tmp_path / "memory:").exists()
        else:
            assert len(ours) == 2 and all(
                m.startswith(f"{where}/tokenizer: a file, not a folder") for m in ours
            )
            assert (tmp_path / "ckpt" / "tokenizer").read_text() == "my notes"
            assert sorted(p.name for p in (tmp_path / "ckpt").iterdir() if not p.name.endswith(".ckpt")) == [
                "tokenizer"
            ]
    finally:
        if fs.exists(f"memory://{tmp_path.name}"):
            fs.rm(f"memory://{tmp_path.name}", recursive=True)
