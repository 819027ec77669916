"""``lightning_order.data.engine.reading``: what both pipelines refuse before ``datasets`` reads a file."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import lightning_order
from lightning_order import DataError
from lightning_order.data.engine import input_digests


def _table(path: Path, texts: list, separator: str) -> Path:
    rows = [f"text{separator}label"] + [f"{text}{separator}{i % 2}" for i, text in enumerate(texts)]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("module", ["OrderedDataModule", "OrderedLMDataModule"])
@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_numbers_in_one_csv_files_text_column_are_refused_naming_the_file(tmp_path, module, suffix):
    separator = "\t" if suffix == ".tsv" else ","
    words = [f"document number {i} says something {'good' if i % 2 else 'bad'}" for i in range(60)]
    good = _table(tmp_path / f"a{suffix}", words, separator)
    numbers = _table(tmp_path / f"b{suffix}", list(range(150)), separator)  # "0".."149" were documents
    dm = getattr(lightning_order, module)(
        dataset="csv", data_files=[str(good), str(numbers)], cache_dir=str(tmp_path / "c"), vocab_size=300
    )
    with pytest.raises(DataError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert info.value.step == "load" and info.value.column == "text"
    assert f"{numbers}: int64" in message and f"{good}: string" in message
    assert "different kinds" in message and "Fix or remove the files" in message
    assert not dm.cache_path.exists() and not list((tmp_path / "c").glob(".tmp-*"))


def test_a_tsv_file_is_read_at_its_tabs_as_a_csv_file_at_its_commas(tmp_path):
    """``datasets``' csv builder split a .tsv at commas: one column named after the header line."""
    words = [f"document {i}, with a comma, says {'good' if i % 2 else 'bad'} things" for i in range(80)]
    tsv = _table(tmp_path / "a.tsv", words, "\t")
    dm = lightning_order.OrderedDataModule(
        dataset="csv",
        data_files=str(tsv),
        label_column="label",
        cache_dir=str(tmp_path / "c"),
        vocab_size=300,
    )
    dm.prepare_data()
    dm.setup("fit")
    assert dm.dims["num_classes"] == 2  # the label column was found: the file was split at its tabs


def test_tab_and_comma_separated_files_in_one_dataset_are_refused(tmp_path):
    words = [f"document {i} says something" for i in range(20)]
    files = [_table(tmp_path / "a.tsv", words, "\t"), _table(tmp_path / "b.csv", words, ",")]
    with pytest.raises(DataError, match=r"mixes tab-separated \(\.tsv\) and comma-separated") as info:
        lightning_order.OrderedLMDataModule(
            dataset="csv", data_files=[str(f) for f in files], cache_dir=str(tmp_path / "c")
        ).prepare_data()
    assert info.value.step == "load" and str(files[0]) in str(info.value)


# -- the input hashed once by load: after the read, its status unchanged since before it ------------
def _settled(path: Path) -> Path:
    """``path`` once its ctime is older than the window in which load also hashes before the read."""
    time.sleep(1.1)  # no timing is asserted: a file written within the last second is hashed twice
    return path


def _words(n: int = 80) -> list[str]:
    return [f"document {i} says {'good' if i % 2 else 'bad'} things" for i in range(n)]


def test_an_unchanged_input_is_hashed_once_by_load(tmp_path, monkeypatch):
    """Before, load hashed every input twice (before and after ``datasets`` read it): 3 reads with the key's."""
    monkeypatch.setattr(input_digests, "UNRECORDED_FILE_SYSTEMS", frozenset())  # tmp_path may be on tmpfs
    data = _settled(_table(tmp_path / "a.csv", _words(), ","))
    dm = lightning_order.OrderedDataModule(
        dataset="csv", data_files=str(data), cache_dir=str(tmp_path / "c"), vocab_size=300
    )
    hashed = []
    real = input_digests.file_digest
    monkeypatch.setattr(input_digests, "file_digest", lambda path: hashed.append(Path(path)) or real(path))
    dm.prepare_data()
    assert hashed.count(data.resolve()) == 1
    assert dm.ledger.latest("load").stats["rows"] == 80


def test_a_file_written_just_before_the_read_is_hashed_before_it_too(tmp_path, monkeypatch):
    """Two writes in one tick of a coarse clock can leave ctime as it was: a fresh file is hashed before the read too."""
    data = _table(tmp_path / "a.csv", _words(), ",")
    dm = lightning_order.OrderedDataModule(
        dataset="csv", data_files=str(data), cache_dir=str(tmp_path / "c"), vocab_size=300
    )
    hashed = []
    real = input_digests.file_digest
    monkeypatch.setattr(input_digests, "file_digest", lambda path: hashed.append(Path(path)) or real(path))
    dm.prepare_data()
    assert hashed.count(data.resolve()) == 2


def test_a_file_changed_after_construction_is_refused_after_the_one_read(tmp_path):
    data = _settled(_table(tmp_path / "a.csv", _words(), ","))
    dm = lightning_order.OrderedDataModule(
        dataset="csv", data_files=str(data), cache_dir=str(tmp_path / "c"), vocab_size=300
    )
    stat = data.stat()
    _table(data, [w.replace("says", "SAYS") for w in _words()], ",")  # same size
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime: only the content tells
    _settled(data)  # and its ctime old again by the time load looks: only the hash after the read sees it
    with pytest.raises(DataError, match="changed after the DataModule was built") as info:
        dm.prepare_data()
    assert info.value.step == "load" and str(data.resolve()) in str(info.value)
    assert "build the DataModule again" in str(info.value)
    assert not dm.cache_path.exists() and not list((tmp_path / "c").glob(".tmp-*"))


@pytest.mark.parametrize("same_bytes", [False, True], ids=["new-content", "same-content"])
def test_a_settled_file_written_while_it_is_read_is_refused(tmp_path, monkeypatch, same_bytes):
    """A write during the read is seen by the file's status, even one that leaves the bytes as they were.

    ``datasets`` may have read the file half-written (truncated, then filled again), so the bytes
    read are not proved to be the bytes hashed.
    """
    import datasets

    data = _settled(_table(tmp_path / "a.csv", _words(), ","))
    dm = lightning_order.OrderedDataModule(
        dataset="csv", data_files=str(data), cache_dir=str(tmp_path / "c"), vocab_size=300
    )
    real = datasets.load_dataset
    content = data.read_bytes()

    def rewriting(*args, **kwargs):
        loaded = real(*args, **kwargs)
        data.write_bytes(content if same_bytes else content.upper())  # a background writer, mid-read
        return loaded

    monkeypatch.setattr(datasets, "load_dataset", rewriting)
    with pytest.raises(DataError, match="changed while it was read") as info:
        dm.prepare_data()
    assert info.value.step == "load" and str(data.resolve()) in str(info.value)
    assert not dm.cache_path.exists()


def test_bytes_that_are_not_utf8_in_a_parquet_string_column_are_refused(tmp_path):
    """Arrow's Parquet reader does not validate UTF-8 (pyarrow 26): the check after the read stays for Parquet too."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [t.encode() for t in _words()]
    texts[41] = b"caf\xe9 au lait"  # latin-1, declared a UTF-8 string column
    path = tmp_path / "a.parquet"
    column = pa.array(texts, pa.binary()).view(pa.string())  # no validation on the way in
    pq.write_table(pa.table({"text": column, "label": [i % 2 for i in range(80)]}), path)
    assert pq.read_table(path)["text"].num_chunks == 1  # Arrow reads it back without a word
    dm = lightning_order.OrderedDataModule(
        dataset="parquet", data_files=str(path), cache_dir=str(tmp_path / "c"), vocab_size=300
    )
    with pytest.raises(DataError, match="Invalid UTF8") as info:
        dm.prepare_data()
    assert info.value.step == "load" and str(path) in str(info.value)
    assert not dm.cache_path.exists()


def test_a_dictionary_encoded_parquet_text_column_is_text_not_numbers(tmp_path):
    """Issue #42 item 4: ``dictionary<values=string>`` was refused as "numbers would silently become documents"."""
    from types import SimpleNamespace

    import pyarrow as pa
    import pyarrow.parquet as pq

    from lightning_order.data.engine.reading import check_text_kinds

    plain, coded, numbers = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": _words(10)}), plain)
    pq.write_table(pa.table({"text": pa.array(_words(10), pa.large_string()).dictionary_encode()}), coded)
    cfg = SimpleNamespace(dataset="parquet", text_column="text", input_files=[str(plain), str(coded)])
    check_text_kinds(cfg)  # both text: no error
    pq.write_table(pa.table({"text": list(range(10))}), numbers)
    with pytest.raises(DataError, match="different kinds") as info:  # numbers are still refused
        check_text_kinds(SimpleNamespace(**{**vars(cfg), "input_files": [str(coded), str(numbers)]}))
    assert f"{numbers}: int64" in str(info.value) and f"{coded}: string" in str(info.value)


@pytest.mark.parametrize("filename", [True, False], ids=["named-by-the-error", "found-by-the-diagnosis"])
def test_a_file_datasets_cannot_read_is_named_with_the_step(tmp_path, monkeypatch, filename):
    """Issue #42 item 4: an ``EIO`` out of ``datasets`` named no file (and the diagnosis raised it raw)."""
    import datasets

    from lightning_order.data.engine import inputs

    data = _table(tmp_path / "a.csv", _words(), ",")
    dm = lightning_order.OrderedDataModule(
        dataset="csv", data_files=str(data), cache_dir=str(tmp_path / "c"), vocab_size=300
    )
    error = OSError(5, "Input/output error", str(data)) if filename else OSError(5, "Input/output error")

    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr(datasets, "load_dataset", refuse)
    monkeypatch.setattr(inputs, "open", refuse, raising=False)  # the diagnosis reads it again: EIO again
    with pytest.raises(DataError, match="could not be read") as info:
        dm.prepare_data()
    message = str(info.value)
    assert str(data) in message and info.value.step == "load" and "\n" not in message
    assert "Input/output error" in message and not dm.cache_path.exists()
