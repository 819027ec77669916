"""``OrderedLMDataModule`` as LLM engineers use it (#26): a folder of source files read with
``dataset="text"`` is one document per file, its indentation and lines kept; a Llama-style
tokenizer whose end-of-text is ``</s>`` prepares and trains.

(``eos_token="</s>"`` refused without the keyword, and a tokenizer trained by ``train_byte_bpe``:
test_hostile_inputs.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from lightning_order import OrderedCausalLM, OrderedLMDataModule, OrderValidator

SMALL = {"vocab_size": 300, "block_size": 16, "num_proc": 1, "val_fraction": 0.2}
NAMES = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]


def _source(i: int, name: str) -> str:
    """A small Python module, distinct per file, with indented and blank lines (as code corpora have)."""
    return (
        f'"""Module {name}: helpers number {i}."""\n\n\n'
        f"def {name}_total(values):\n"
        f"    total = {i}\n"
        "    for value in values:\n"
        f"        if value > {i * 3}:\n"
        f"            total += value * {i + 1}\n"
        "        else:\n"
        "            return None\n"
        "    return total\n\n\n"
        f"class {name.title()}Counter:\n"
        f"    start = {i * 7}\n"
    )


@pytest.fixture(scope="module")
def code_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("code")
    texts = {}
    for i, name in enumerate(NAMES * 2):
        text = _source(i, f"{name}{i}")
        (folder / f"{name}_{i}.txt").write_text(text)
        texts[f"{name}_{i}"] = text
    return folder, texts


def test_a_folder_of_text_files_is_one_document_per_file_with_its_indentation(
    tmp_path: Path, code_folder: tuple[Path, dict[str, str]]
) -> None:
    folder, texts = code_folder
    dm = OrderedLMDataModule(dataset="text", data_files=str(folder), cache_dir=str(tmp_path / "c"), **SMALL)
    dm.setup("fit")
    documents = [*dm.documents("train"), *dm.documents("val")]
    assert dm.ledger.latest("load").stats["rows"] == len(texts) == len(documents)
    assert dm.ledger.latest("dedup").stats["exact_removed"] == 0  # no line ("    return total") is a document
    assert dm.ledger.info["config"]["sample_by"] == "document"
    # Each document is one file: its lines, indentation included, in order (cleaning only makes
    # three or more line breaks two).
    lines = sorted([line for line in d.splitlines() if line.strip()] for d in documents)
    assert lines == sorted([line for line in t.splitlines() if line.strip()] for t in texts.values())
    assert len(dm.documents("train")) and len(dm.documents("val"))  # whole files on each side of the split
    # The packed blocks decode back to the files' lines, indentation included.
    ids = [int(t) for t in dm.blocks("train")[:, :-1].reshape(-1) if t != dm.eos_token_id]
    decoded = dm.tokenizer.decode(ids)
    assert "\n    for value in values:\n        if value > " in decoded
    assert "\n            total += value * " in decoded


def test_sample_by_line_is_the_old_one_document_per_line(
    tmp_path: Path, code_folder: tuple[Path, dict[str, str]]
) -> None:
    folder, texts = code_folder
    dm = OrderedLMDataModule(
        dataset="text", data_files=str(folder), sample_by="line", cache_dir=str(tmp_path / "c"), **SMALL
    )
    by_line = dm.ledger
    assert by_line.latest("load").stats["rows"] == sum(len(t.splitlines()) for t in texts.values())
    assert by_line.latest("dedup").stats["exact_removed"] > 0  # "    return total" in every file
    assert by_line.info["config"]["sample_by"] == "line"


def _llama_style_tokenizer(path: Path, texts: list[str]) -> Path:
    """A BPE with Llama's special tokens (``<unk>``, ``<s>``, ``</s>``), trained here and saved."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.save(str(path))
    return path


@pytest.mark.filterwarnings("ignore::UserWarning")  # Lightning's advice about workers and logging on CPU
def test_a_llama_style_tokenizer_with_its_own_end_of_text_prepares_and_trains(
    tmp_path: Path, code_folder: tuple[Path, dict[str, str]]
) -> None:
    import pytorch_lightning as pl

    folder, texts = code_folder
    path = _llama_style_tokenizer(tmp_path / "tokenizer.json", list(texts.values()))
    dm = OrderedLMDataModule(
        dataset="text",
        data_files=str(folder),
        tokenizer_file=str(path),
        eos_token="</s>",
        cache_dir=str(tmp_path / "c"),
        batch_size=4,
        **SMALL,
    )
    dm.prepare_data()
    assert dm.eos_token_id == Tokenizer.from_file(str(path)).token_to_id("</s>") == 2
    assert dm.ledger.latest("build_vocab").params["source"] == "supplied"
    model = OrderedCausalLM(**dm.dims, n_layer=1, n_head=2, n_embd=32)
    validator = OrderValidator()
    trainer = pl.Trainer(
        max_steps=3,
        accelerator="cpu",
        callbacks=[validator],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(model, datamodule=dm)
    assert trainer.global_step == 3 and validator.violations == []
    assert (dm.blocks("train") == dm.eos_token_id).any()  # one </s> after every document


def test_a_byte_order_mark_never_starts_a_document_and_is_counted(
    tmp_path: Path, code_folder: tuple[Path, dict[str, str]]
) -> None:
    _, texts = code_folder
    plain, marked = tmp_path / "plain", tmp_path / "marked"
    plain.mkdir(), marked.mkdir()
    for i, (name, text) in enumerate(sorted(texts.items())):
        (plain / f"{name}.txt").write_text(text, encoding="utf-8")
        (marked / f"{name}.txt").write_text(
            text, encoding="utf-8-sig" if i % 2 else "utf-8"
        )  # Windows editors
    kept = {}
    for folder in (marked, plain):
        dm = OrderedLMDataModule(
            dataset="text", data_files=str(folder), cache_dir=str(tmp_path / "c"), **SMALL
        )
        kept[folder.name] = sorted([*dm.documents("train"), *dm.documents("val")])
        assert not any("\ufeff" in document for document in kept[folder.name])
        expected = len(texts) // 2 if folder is marked else 0
        assert dm.ledger.latest("clean").stats["bom_stripped"] == expected
    assert kept["marked"] == kept["plain"]  # the same documents, mark or not
