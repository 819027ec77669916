"""Bounded work on hostile text, and no temporary folder left by a failed or interrupted preparation."""

from __future__ import annotations

import csv
import os
import random
import string
import time

import pytest
from filelock import FileLock

from lightning_order import OrderedDataModule
from lightning_order.data.engine import cache
from lightning_order.data.text.vocab import (
    MAX_WORD_CHARS,
    bounded_pre_tokenizer,
    encode_bounded,
    train_tokenizer,
)

WORDS = ["good", "bad", "fine", "meh", "great", "awful", "ok", "nice"]


def _token(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choices(string.ascii_lowercase, k=n))


def _normal(rows: int = 200) -> list[str]:
    rng = random.Random(1)
    return [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(rows)]


def test_the_pre_tokenizer_cuts_long_runs_only():
    pieces = [p for p, _ in bounded_pre_tokenizer().pre_tokenize_str("Hello, world! " + "a" * 250)]
    assert pieces == ["Hello", ",", "world", "!", "a" * MAX_WORD_CHARS, "a" * MAX_WORD_CHARS, "a" * 50]


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_encode_bounded_gives_exactly_the_ids_of_a_whole_encode(kind):
    tok = train_tokenizer(lambda: iter([_normal()]), 300, kind)
    tok.enable_padding(pad_id=0, pad_token="[PAD]", length=16)
    tok.enable_truncation(max_length=16)
    rng = random.Random(2)
    texts = ["".join(rng.choices(string.ascii_lowercase + "  ,.!é", k=n)) for n in (10, 5000, 100_000)]
    texts += ["a" + " " * 200_000 + " good bad", "x" * 300_000, "ok! " * 50_000, " ".join(["ab" * 150] * 500)]
    whole = tok.encode_batch(texts, add_special_tokens=False)
    bounded = encode_bounded(tok, texts, 16)
    assert [e.ids for e in bounded] == [e.ids for e in whole]
    assert [e.attention_mask for e in bounded] == [e.attention_mask for e in whole]


class _CountingTokenizer:
    """A tokenizer that counts the characters it is handed to encode (the work that was quadratic)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.encoded_chars = tokenizer, 0

    @property
    def truncation(self):
        return self.tokenizer.truncation

    def encode_batch(self, texts, **kwargs):
        self.encoded_chars += sum(len(text) for text in texts)
        return self.tokenizer.encode_batch(texts, **kwargs)


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_vocab_and_encode_work_does_not_grow_with_one_rows_length(kind):
    """Training on and encoding one 5 MB token does the work a 50 KB one does (it was quadratic):
    the trainer's words are cut to MAX_WORD_CHARS, and encode reads a bounded prefix."""

    def work(n: int) -> tuple[int, int]:
        tok = train_tokenizer(lambda: iter([[*_normal(), _token(n)[:65536]]]), 300, kind)
        tok.enable_truncation(max_length=16)
        longest_word = max(len(piece) for piece, _ in tok.pre_tokenizer.pre_tokenize_str(_token(n)))
        counting = _CountingTokenizer(tok)
        encode_bounded(counting, [_token(n)], 16)
        return longest_word, counting.encoded_chars

    small, big = work(50_000), work(5_000_000)
    assert big == small  # 100x longer, the same work
    assert small[0] == MAX_WORD_CHARS and small[1] < 50_000


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_a_5mb_token_without_spaces_is_prepared_and_served_cut_to_max_length(tmp_path, kind):
    rows = [{"text": t, "label": i % 2} for i, t in enumerate(_normal())]
    rows.append({"text": _token(5_000_000), "label": 0})
    with open(tmp_path / "a.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["text", "label"])
        writer.writeheader()
        writer.writerows(rows)
    dm = OrderedDataModule(
        "csv",
        data_files=str(tmp_path / "a.csv"),
        cache_dir=str(tmp_path / "c"),
        vocab_size=300,
        max_length=16,
        tokenizer=kind,
        demo_size=1,
        batch_size=1,  # every row is served: none is left out of a global batch
    )
    dm.setup("fit")
    assert dm.ledger.latest("load").stats["rows"] == 201
    lengths = [int(b["attention_mask"].sum(1).max()) for b in dm.train_dataloader()]
    assert max(lengths) == 16
    assert not list((tmp_path / "c").glob(".tmp-*"))


# -- temporary folders -------------------------------------------------------------------------
@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, RuntimeError, MemoryError])
def test_a_failed_or_interrupted_prepare_leaves_no_temp_folder(tmp_path, interrupt):
    def build(folder):
        (folder / "train").mkdir()
        (folder / "train" / "half.arrow").write_bytes(b"x" * 100)
        raise interrupt("stopped")

    with pytest.raises(interrupt):
        cache.build_once(tmp_path, "0" * 32, build)
    assert not list(tmp_path.glob(".tmp-*")) and not (tmp_path / ("0" * 32)).exists()


def test_stale_temp_folders_of_other_configurations_are_cleaned_when_safe(tmp_path):
    old = time.time() - cache.STALE_AFTER_S - 60
    folders = {}
    for name, age in (("stale", old), ("young", None), ("locked", old)):
        key = {"stale": "5", "young": "7", "locked": "1"}[name] * 32
        folders[name] = cache.new_temp_dir(tmp_path, key)
        (folders[name] / "x").write_text("half")
        if age is not None:
            os.utime(folders[name], (age, age))
    with FileLock(str(tmp_path / f"{'1' * 32}.lock")):  # another process is preparing "locked"
        removed = cache.remove_stale_others(tmp_path, "f" * 32)
    assert removed == [folders["stale"]]
    assert not folders["stale"].exists() and folders["young"].exists() and folders["locked"].exists()
    # build_once cleans them too, and never the temp folder of a configuration being prepared
    os.utime(folders["young"], (old, old))
    with FileLock(str(tmp_path / f"{'1' * 32}.lock")):
        cache.build_once(tmp_path, "e" * 32, lambda folder: (folder / "manifest.json").write_text("{}"))
    assert not folders["young"].exists() and folders["locked"].exists()
