"""Issue #21's adversarial cases on the LM pipeline: each one failed (silently wrong, a crash or a raw
traceback) before; each is now used as the pipeline needs it, or refused in one line naming the step.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from lightning_order import DataError, OrderedLMDataModule
from lightning_order.data.engine import cache
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.tokenizer import train_byte_bpe

SMALL = {"vocab_size": 300, "block_size": 16, "num_proc": 1}


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return stdlib_corpus(300)


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _saved(tokenizer: Tokenizer, path: Path) -> str:
    tokenizer.save(str(path))
    return str(path)


# -- a supplied tokenizer is used as the pipeline needs it ------------------------------------------
@pytest.mark.parametrize("setting", ["truncation", "padding"])
def test_a_supplied_tokenizers_truncation_and_padding_are_switched_off_and_recorded(tmp_path, docs, setting):
    tokenizer = train_byte_bpe(docs, 300)
    plain = _saved(tokenizer, tmp_path / "plain.json")
    if setting == "truncation":
        tokenizer.enable_truncation(8)
    else:
        tokenizer.enable_padding(pad_id=0, pad_token="<|endoftext|>", length=64)
    hostile = _saved(tokenizer, tmp_path / "hostile.json")
    dm = OrderedLMDataModule(
        cache_dir=str(tmp_path / "a"), max_documents=300, tokenizer_file=hostile, **SMALL
    )
    reference = OrderedLMDataModule(
        cache_dir=str(tmp_path / "b"), max_documents=300, tokenizer_file=plain, **SMALL
    )
    record = dm.ledger.latest("build_vocab")
    assert record.params["switched_off"] == [setting] and record.params["source"] == "supplied"
    assert record.fitted_on is None  # supplied: it learned nothing from this run's split
    assert dm.ledger.latest("encode").stats == {
        **reference.ledger.latest("encode").stats,
        "seconds": dm.ledger.latest("encode").stats["seconds"],
    }
    assert (
        dm.ledger.latest("pack").stats["train_blocks"]
        == reference.ledger.latest("pack").stats["train_blocks"]
    )


def test_a_supplied_tokenizer_that_drops_characters_is_refused(tmp_path, docs):
    tokenizer = Tokenizer(models.BPE())  # no unknown token, no byte fallback: unknown characters vanish
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], limit_alphabet=20, show_progress=False
    )
    tokenizer.train_from_iterator(docs, trainer=trainer)
    path = _saved(tokenizer, tmp_path / "lossy.json")
    dm = OrderedLMDataModule(cache_dir=str(tmp_path / "c"), max_documents=300, tokenizer_file=path, **SMALL)
    with pytest.raises(DataError, match="cannot encode") as info:
        dm.prepare_data()
    assert info.value.step == "build_vocab" and "byte_fallback" in str(info.value)
    assert not dm.cache_path.exists()


@pytest.mark.parametrize("eos_id", [420, 999_999])
def test_an_end_of_text_id_beyond_the_tokenizers_size_is_refused(tmp_path, docs, eos_id):
    data = json.loads(train_byte_bpe(docs, 300, eos_token="<|x|>").to_str())
    data["added_tokens"].append(
        {
            "id": eos_id,
            "content": "<|endoftext|>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    )
    data["model"]["vocab"]["<|endoftext|>"] = eos_id
    path = tmp_path / "gappy.json"
    path.write_text(json.dumps(data))
    dm = OrderedLMDataModule(
        cache_dir=str(tmp_path / "c"), max_documents=300, tokenizer_file=str(path), **SMALL
    )
    with pytest.raises(DataError, match=f"gives id {eos_id}") as info:
        dm.prepare_data()
    assert info.value.step == "build_vocab"


def test_a_llama_style_end_of_text_token_is_taken_with_eos_token(tmp_path, docs):
    path = _saved(train_byte_bpe(docs, 300, eos_token="</s>"), tmp_path / "llama.json")
    with pytest.raises(DataError, match="eos_token="):
        OrderedLMDataModule(
            cache_dir=str(tmp_path / "a"), max_documents=300, tokenizer_file=path, **SMALL
        ).prepare_data()
    dm = OrderedLMDataModule(
        cache_dir=str(tmp_path / "b"), max_documents=300, tokenizer_file=path, eos_token="</s>", **SMALL
    )
    dm.setup("fit")
    assert dm.eos_token == "</s>" and dm.eos_token_id == dm.tokenizer.token_to_id("</s>")
    assert (dm.blocks("train") == dm.eos_token_id).any()


# -- what is hashed is what was read --------------------------------------------------------------
def test_a_tokenizer_file_rewritten_after_construction_is_refused(tmp_path, docs):
    path = Path(_saved(train_byte_bpe(docs, 300), tmp_path / "tok.json"))
    dm = OrderedLMDataModule(
        cache_dir=str(tmp_path / "c"), max_documents=300, tokenizer_file=str(path), **SMALL
    )
    _saved(train_byte_bpe(docs[:100], 280), path)  # another tokenizer under the same name
    with pytest.raises(DataError, match="changed after the DataModule was built") as info:
        dm.prepare_data()
    assert info.value.step == "build_vocab" and not dm.cache_path.exists()


@pytest.mark.parametrize("reader", ["datasets", "workers"])
def test_a_data_file_rewritten_while_it_is_read_is_refused(tmp_path, docs, monkeypatch, reader):
    import datasets

    from lightning_order.data.lm import range_reading

    path = _jsonl(tmp_path / "docs.jsonl", [{"text": d} for d in docs])
    # max_documents keeps datasets' path; without it, workers read the file's ranges themselves
    limit = {"max_documents": len(docs)} if reader == "datasets" else {}
    module, name = (datasets, "load_dataset") if reader == "datasets" else (range_reading, "read_range")
    real = getattr(module, name)

    def rewriting(*args, **kwargs):
        loaded = real(*args, **kwargs)
        _jsonl(path, [{"text": d.upper()} for d in docs])  # a background writer, mid-read
        return loaded

    dm = OrderedLMDataModule("json", data_files=str(path), cache_dir=str(tmp_path / "c"), **SMALL, **limit)
    monkeypatch.setattr(module, name, rewriting)
    with pytest.raises(DataError, match="changed while it was read") as info:
        dm.prepare_data()
    assert info.value.step == "load" and not dm.cache_path.exists()


# -- every value checked where it enters ----------------------------------------------------------
def test_text_of_different_kinds_across_files_is_refused_naming_them(tmp_path, docs):
    good = _jsonl(tmp_path / "a.jsonl", [{"text": d} for d in docs[:50]])
    bad = _jsonl(tmp_path / "b.jsonl", [{"text": i} for i in range(150)])
    dm = OrderedLMDataModule("json", data_files=[str(good), str(bad)], cache_dir=str(tmp_path / "c"), **SMALL)
    with pytest.raises(DataError, match="different kinds") as info:
        dm.prepare_data()
    assert str(bad) in str(info.value) and info.value.column == "text"


def test_null_text_is_dropped_and_counted(tmp_path, docs):
    path = _jsonl(tmp_path / "docs.jsonl", [{"text": d} for d in docs[:200]] + [{"text": None}] * 3)
    dm = OrderedLMDataModule("json", data_files=str(path), cache_dir=str(tmp_path / "c"), **SMALL)
    assert dm.ledger.latest("load").stats["null_rows"] == 3
    assert dm.ledger.latest("clean").stats["dropped_null"] == 3


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b'{"text": "caf\xe9 au lait"}\n', "is not UTF-8: byte 0xe9"),
        (b'{"text": "fine"}\n{"text": "broken\n', "line 2"),
    ],
    ids=["latin-1-byte", "malformed-json-line"],
)
def test_bad_bytes_and_bad_lines_name_the_file_and_line(tmp_path, docs, content, words):
    path = tmp_path / "docs.jsonl"
    path.write_bytes(b"".join(json.dumps({"text": d}).encode() + b"\n" for d in docs[:20]) + content)
    dm = OrderedLMDataModule("json", data_files=str(path), cache_dir=str(tmp_path / "c"), **SMALL)
    with pytest.raises(DataError, match=words) as info:
        dm.prepare_data()
    assert str(path) in str(info.value) and info.value.step == "load" and "\n" not in str(info.value)


def test_a_marker_split_by_a_control_character_cannot_form_again(tmp_path, docs):
    path = _jsonl(
        tmp_path / "docs.jsonl",
        [{"text": d} for d in docs[:200]] + [{"text": "see <|endo\x00ftext|> here " * 20}],
    )
    dm = OrderedLMDataModule("json", data_files=str(path), cache_dir=str(tmp_path / "c"), **SMALL)
    dm.setup("fit")
    assert not any("<|endoftext|>" in d for d in dm.documents("train")) and not any(
        "<|endoftext|>" in d for d in dm.documents("val")
    )
    encode = dm.ledger.latest("encode").stats
    assert encode["eos_tokens"] == encode["documents"]  # one per document, none from the text


@pytest.mark.parametrize(
    ("kwargs", "step", "words"),
    [
        ({"seed": 1.9}, "split", "seed must be an int, got 1.9"),
        ({"seed": "abc"}, "split", "seed must be an int"),
        ({"seed": None}, "split", "seed must be an int"),
        ({"eos": "false"}, "encode", "eos must be true or false"),
        ({"shuffle": "false"}, "shard", "shuffle must be true or false"),
        ({"enforce": "no"}, "prepare_data", "enforce must be true or false"),
        ({"pad_vocab_multiple": 10**12}, "build_vocab", "pad_vocab_multiple must be an int <= 65536"),
        ({"batch_size": 0}, "shard", "batch_size must be an int >= 1"),
        ({"num_workers": -1}, "shard", "num_workers must be an int >= 0"),
        ({"data_files": 5}, "load", "data_files must be a path"),
        ({"lock_timeout": -1}, "prepare_data", "lock_timeout must be"),
        ({"eos_token": ""}, "build_vocab", "eos_token must be a non-empty string"),
    ],
)
def test_values_that_are_not_what_they_claim_are_refused_at_construction(tmp_path, kwargs, step, words):
    with pytest.raises(DataError, match=words.replace("(", r"\(")) as info:
        OrderedLMDataModule(cache_dir=str(tmp_path), **kwargs)
    assert info.value.step == step


# -- bounded memory on one huge document ------------------------------------------------------------
def test_one_long_document_is_encoded_in_pieces_to_the_same_ids(docs):
    from lightning_order.data.lm.blocks import MAX_PIECE_CHARS, encode_documents

    tokenizer = train_byte_bpe(docs, 300)
    huge = "\n\n".join(docs) * 4
    assert len(huge) > 3 * MAX_PIECE_CHARS
    stream = encode_documents(tokenizer, [huge], 0)
    assert stream.ids[:-1].tolist() == tokenizer.encode(huge, add_special_tokens=False).ids


def test_a_long_document_read_from_arrow_is_encoded_from_its_bytes_to_the_same_ids(docs):
    """From a partition file, a long document is cut and decoded piece by piece from its UTF-8 bytes
    (never decoded whole, which may take four bytes a character), to the ids of the whole text."""
    import pyarrow as pa

    from lightning_order.data.engine.partitions import TextColumn
    from lightning_order.data.lm.blocks import MAX_PIECE_CHARS, encode_documents, utf8_pieces

    tokenizer = train_byte_bpe(docs, 300)
    huge = "\n\n".join(docs) * 3 + " é—→𝔘 " + "x" * (2 * MAX_PIECE_CHARS) + "é" * MAX_PIECE_CHARS + " end \n"
    texts = ["ab c", "", "  é  ", huge, docs[5]]
    pieces = list(utf8_pieces(memoryview(huge.encode())))
    assert "".join(pieces) == huge and len(pieces) > 5
    assert max(len(p.encode()) for p in pieces) <= MAX_PIECE_CHARS
    column = pa.chunked_array(
        [pa.array(texts[:2], pa.large_string()), pa.array(texts[2:], pa.large_string())]
    )
    from_strings, from_bytes = (
        encode_documents(tokenizer, texts, 0),
        encode_documents(tokenizer, TextColumn(column), 0),
    )
    assert from_bytes.ids.tolist() == from_strings.ids.tolist()
    assert from_bytes.ends.tolist() == from_strings.ends.tolist()
    prose = "\n\n".join(docs) * 3
    assert len(prose.encode()) > 3 * MAX_PIECE_CHARS
    alone = encode_documents(tokenizer, TextColumn(pa.chunked_array([pa.array([prose]).slice(0)])), 0)
    assert alone.ids[:-1].tolist() == tokenizer.encode(prose, add_special_tokens=False).ids


# -- locks that speak -----------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_lock_held_by_a_stuck_process_is_named_and_given_up_on(tmp_path, caplog, monkeypatch):
    dm = OrderedLMDataModule(cache_dir=str(tmp_path), max_documents=100, lock_timeout=1.5, **SMALL)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from lightning_order.data.engine.cache import acquire_lock; "
            f"lock = acquire_lock(Path({str(tmp_path)!r}), {dm.cache_key!r}, None, 'test'); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(cache, "LOCK_NOTICE_S", 0.5)
        with pytest.raises(DataError, match=f"held by process {holder.pid}") as info:
            dm.prepare_data()  # gives up after lock_timeout (the test's timeout is the hard stop)
        assert "alive" in str(info.value) and info.value.step == "prepare_data"
        assert any("waiting" in r.message and str(holder.pid) in r.message for r in caplog.records)
    finally:
        holder.kill()
        holder.wait()
    dm.prepare_data()  # the holder is gone: its lock is released by the system, and taken
    assert dm.cache_path.is_dir() and not (tmp_path / f"{dm.cache_key}.lock.json").exists()


def test_the_validator_sees_ids_beyond_the_tokenizer_in_a_resealed_cache(tmp_path):
    """A tampered cache whose manifest was re-sealed: ids inside the padding rows are compared with the tokenizer's size."""
    from helpers import lm_violations

    from lightning_order import OrderedCausalLM, OrderValidator
    from lightning_order.data.engine.storage import file_records
    from lightning_order.ledger import MANIFEST_NAME, StepLedger

    dm = OrderedLMDataModule(cache_dir=str(tmp_path), max_documents=200, **SMALL)
    dm.prepare_data()
    path = dm.cache_path
    shard = path / "train" / "blocks" / "part-00000.npy"  # the first shard of the train blocks
    blocks = np.load(shard)
    size = dm.vocab_size
    assert dm.dims["padded_vocab_size"] > size + 5
    blocks[:, 3] = size + 5  # inside the padding rows: the embedding table accepts it
    np.save(shard, blocks)
    ledger = StepLedger.load(path)
    ledger.info["files"] = file_records(path, skip=(MANIFEST_NAME, cache.TEMP_MARKER, "work"))
    ledger.save(path)  # re-sealed: every hash matches again
    fresh = OrderedLMDataModule(cache_dir=str(tmp_path), max_documents=200, **SMALL)
    fresh.setup("fit")
    model = OrderedCausalLM(**fresh.dims, n_layer=1, n_head=2, n_embd=16)
    found = lm_violations(fresh, model, OrderValidator().sample_rows)
    assert [v.rule for v in found] == ["vocab-changed-after-init"] and "tokenizer in use" in found[0].message
