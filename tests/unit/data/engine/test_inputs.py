"""Input identity from what will be read: globs and folders expanded, every file's content in the cache key."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from lightning_order import DataError, OrderedDataModule
from lightning_order.data.engine.inputs import check_dataset_name, expand_data_files, files_identity
from lightning_order.data.engine.storage import file_digest
from lightning_order.data.text.config import DataConfig

SMALL = {"vocab_size": 100, "max_length": 16}


def _write(path: Path, rows: int, start: int = 0) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["text", "label"])
        writer.writeheader()
        for i in range(start, start + rows):
            writer.writerow(
                {"text": f"row {i} says {'good' if i % 2 else 'bad'} thing {i * 7}", "label": i % 2}
            )
    return path


def test_a_glob_is_expanded_and_a_new_matching_file_changes_the_key(tmp_path):
    (tmp_path / "d").mkdir()
    _write(tmp_path / "d" / "a.csv", 120)
    pattern = str(tmp_path / "d" / "*.csv")
    dm = OrderedDataModule("csv", data_files=pattern, cache_dir=str(tmp_path / "c"), **SMALL)
    assert dm.config.input_files == [str((tmp_path / "d" / "a.csv").resolve())]
    assert dm.ledger.latest("load").stats["rows"] == 120
    _write(tmp_path / "d" / "b.csv", 80, start=500)
    again = OrderedDataModule("csv", data_files=pattern, cache_dir=str(tmp_path / "c"), **SMALL)
    assert again.cache_key != dm.cache_key
    assert again.ledger.latest("load").stats["rows"] == 200  # the new rows are read, not the old cache


def test_a_folder_is_read_as_its_files_and_a_new_file_changes_the_key(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    _write(folder / "a.csv", 120)
    (folder / "notes.md").write_text("not data")  # not a csv: the csv builder does not read it
    (folder / ".hidden.csv").write_text("text,label\n")
    dm = OrderedDataModule("csv", data_files=str(folder), cache_dir=str(tmp_path / "c"), **SMALL)
    assert [Path(f).name for f in dm.config.input_files] == ["a.csv"]
    assert dm.ledger.latest("load").stats["rows"] == 120
    _write(folder / "sub.csv", 40, start=900)
    again = OrderedDataModule("csv", data_files=str(folder), cache_dir=str(tmp_path / "c"), **SMALL)
    assert again.cache_key != dm.cache_key and again.ledger.latest("load").stats["rows"] == 160


def _rewrite_same_size_and_mtime(path: Path) -> None:
    stat = path.stat()
    data = path.read_bytes()
    index = data.index(b"good")
    path.write_bytes(data[:index] + b"gold" + data[index + 4 :])  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns


def test_a_rewrite_with_the_same_size_and_mtime_changes_the_key_by_default(tmp_path):
    path = _write(tmp_path / "a.csv", 120)
    before = DataConfig(dataset="csv", data_files=str(path))
    stat_before = DataConfig(dataset="csv", data_files=str(path), input_hash="size_mtime")
    _rewrite_same_size_and_mtime(path)
    after = DataConfig(dataset="csv", data_files=str(path))
    assert after.identity(["load"]) != before.identity(["load"])  # content hashing sees it
    # the documented opt-in shortcut trusts size and mtime, so it does not
    stat_after = DataConfig(dataset="csv", data_files=str(path), input_hash="size_mtime")
    assert stat_after.identity(["load"]) == stat_before.identity(["load"])
    assert stat_after.identity(["load"]) != after.identity(["load"])


def test_a_file_changed_after_construction_is_refused_at_load(tmp_path):
    path = _write(tmp_path / "a.csv", 120)
    dm = OrderedDataModule("csv", data_files=str(path), cache_dir=str(tmp_path / "c"), **SMALL)
    _rewrite_same_size_and_mtime(path)
    with pytest.raises(DataError, match="changed after the DataModule was built") as info:
        dm.prepare_data()
    assert info.value.step == "load" and str(path.resolve()) in str(info.value)
    assert not list((tmp_path / "c").glob(".tmp-*")) and not dm.cache_path.exists()


def test_identity_of_each_kind_of_data_files(tmp_path):
    a, b = _write(tmp_path / "a.csv", 3), _write(tmp_path / "b.csv", 3)
    assert expand_data_files(None) is None
    assert expand_data_files({"train": str(tmp_path / "*.csv")}, "csv") == {
        "train": [str(a.resolve()), str(b.resolve())]
    }
    assert expand_data_files("hf://datasets/x/y/*.csv", "csv") == ["hf://datasets/x/y/*.csv"]
    assert expand_data_files("data/*.csv", "user/hub-dataset") == ["data/*.csv"]  # resolved in the repo
    # by content: the size and the 128-bit xxh3 of the bytes, and no path (issue #46)
    assert files_identity([str(a)]) == [[a.stat().st_size, f"xxh3:{file_digest(a)}"]]
    # by metadata: no byte seen, so the path still tells two folders' files of one size and mtime apart
    assert files_identity([str(a)], "size_mtime") == [[a.stat().st_size, a.stat().st_mtime_ns, str(a)]]


@pytest.mark.parametrize(
    ("data_files", "words"),
    [
        ("{tmp}/*.parquet", ["matches no file"]),
        ("{tmp}/empty", ["holds no", ".csv", "folder"]),
    ],
)
def test_a_glob_or_folder_naming_nothing_is_refused_at_construction(tmp_path, data_files, words):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.txt").write_text("hello")
    with pytest.raises(DataError) as info:
        OrderedDataModule("csv", data_files=data_files.format(tmp=tmp_path), cache_dir=str(tmp_path / "c"))
    assert info.value.step == "load"
    assert all(w in str(info.value) for w in words), str(info.value)


def test_input_hash_is_checked():
    with pytest.raises(DataError, match="input_hash must be one of content, size_mtime, got 'mtime'"):
        DataConfig(input_hash="mtime")


# -- a dataset name load could only look up on the hub (#26) ------------------------------------
def _count_loads(monkeypatch, datasets):
    """The names ``datasets.load_dataset`` (or ``load_dataset_builder``) is asked for from now on."""
    loads = []

    def load(path, *args, **kwargs):
        loads.append(path)
        raise RuntimeError(f"datasets asked for {path!r}")

    monkeypatch.setattr(datasets, "load_dataset", load)
    monkeypatch.setattr(datasets, "load_dataset_builder", load)
    return loads


@pytest.mark.parametrize("module", ["OrderedDataModule", "OrderedLMDataModule"])
def test_a_dataset_name_that_is_no_builder_nor_path_is_refused_at_once(tmp_path, module, monkeypatch):
    import datasets

    import lightning_order

    loads = _count_loads(monkeypatch, datasets)
    (tmp_path / "a.txt").write_text("one document\n")
    with pytest.raises(DataError) as info:
        getattr(lightning_order, module)(dataset="txt", data_files=str(tmp_path / "a.txt"))
    assert loads == []  # refused before datasets is asked: no retries against the hub
    message = str(info.value)
    assert "[step 'load']" in message and "dataset='txt'" in message
    assert "did you mean dataset='text'?" in message and "--local-dir" in message


@pytest.mark.parametrize("dataset", [None, "text", "csv", "json", "parquet", "arrow", "imagefolder"])
def test_a_builder_datasets_ships_is_accepted(dataset):
    check_dataset_name(dataset)


def test_a_local_path_or_a_cached_hub_dataset_is_accepted(tmp_path, monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    (tmp_path / "my_dataset").mkdir()
    check_dataset_name(str(tmp_path / "my_dataset"))
    with pytest.raises(DataError, match="neither a datasets builder"):
        check_dataset_name("someone/corpus")
    (tmp_path / "hub" / "datasets--someone--corpus").mkdir(parents=True)
    check_dataset_name("someone/corpus")


@pytest.mark.parametrize("dataset", ["a\x00b", "~no_such_user_here/x", "x" * 5000, "user/typo"])
def test_a_name_no_file_system_takes_is_refused_in_the_same_words(dataset):
    with pytest.raises(DataError, match="neither a datasets builder"):
        check_dataset_name(dataset)


# -- read only what was named (#32) ---------------------------------------------------------------
@pytest.mark.parametrize("module", ["OrderedDataModule", "OrderedLMDataModule"])
@pytest.mark.parametrize("dataset", ["text", "csv", "json", "parquet"])
def test_a_file_builder_without_data_files_is_refused_not_the_working_directory_read(
    tmp_path, monkeypatch, module, dataset
):
    import lightning_order

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("SECRET=1\n")
    with pytest.raises(DataError) as info:
        getattr(lightning_order, module)(dataset=dataset, cache_dir=str(tmp_path / "c"))
    message = str(info.value)
    assert info.value.step == "load" and f"dataset={dataset!r}" in message
    assert "none is given" in message and "every file under the working directory" in message
    assert "data_files='corpus/*." in message  # the fix
    assert not (tmp_path / "c").exists()


def test_a_recursive_glob_through_a_link_loop_names_each_file_once(tmp_path):
    folder = tmp_path / "d"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("one\n")
    (folder / "sub" / "b.txt").write_text("two\n")
    (folder / "sub" / "loop").symlink_to("..")  # d/sub/loop/sub/loop/... without end
    (folder / "sub" / "again").symlink_to(folder)  # a second way to the same files
    expected = [str((folder / "a.txt").resolve()), str((folder / "sub" / "b.txt").resolve())]
    for pattern in (f"{folder}/**/*.txt", f"{folder}/**"):
        assert expand_data_files(pattern, "text") == expected
    # two overlapping patterns: each file read once
    assert expand_data_files([f"{folder}/*.txt", f"{folder}/**/*.txt"], "text") == expected
    config = DataConfig(dataset="text", data_files=f"{folder}/**/*.txt")
    assert config.input_files == expected and len(config.input_identity) == 2


def test_environment_variables_and_home_in_paths_are_expanded(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    data = _write(tmp_path / "home" / "a.csv", 10)
    for given in ("$SCRATCH/x", "${SCRATCH}/x"):
        assert DataConfig(dataset="csv", data_files=str(data), cache_dir=given).cache_dir == str(
            tmp_path / "scratch" / "x"
        )
    dm = OrderedDataModule("csv", data_files="~/a.csv", cache_dir="$SCRATCH/x", **SMALL)
    assert dm.cache_root == tmp_path / "scratch" / "x"
    assert dm.config.input_files == [str(data.resolve())]
    monkeypatch.setenv("DATA", str(tmp_path / "home"))
    assert DataConfig(dataset="csv", data_files="$DATA/*.csv").input_files == [str(data.resolve())]
    assert not (tmp_path / "$SCRATCH").exists() and not (tmp_path / "~").exists()


@pytest.mark.parametrize(("argument", "step"), [("cache_dir", "prepare_data"), ("data_files", "load")])
def test_an_unset_environment_variable_in_a_path_is_refused(tmp_path, monkeypatch, argument, step):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_SUCH_VARIABLE_HERE", raising=False)
    arguments = {"data_files": str(_write(tmp_path / "a.csv", 10)), argument: "$NO_SUCH_VARIABLE_HERE/x"}
    with pytest.raises(DataError) as info:
        DataConfig(dataset="csv", **arguments)
    message = str(info.value)
    assert info.value.step == step and f"{argument}='$NO_SUCH_VARIABLE_HERE/x'" in message
    assert (
        "$NO_SUCH_VARIABLE_HERE, which is not set" in message and "export NO_SUCH_VARIABLE_HERE=" in message
    )
    assert list(tmp_path.iterdir()) == [tmp_path / "a.csv"]  # no folder named "$NO_SUCH_VARIABLE_HERE"


@pytest.mark.parametrize("module", ["OrderedDataModule", "OrderedLMDataModule"])
def test_a_local_dataset_folder_is_identified_by_its_files(tmp_path, module):
    import pyarrow as pa
    import pyarrow.parquet as pq

    import lightning_order

    folder = tmp_path / "my_dataset"
    folder.mkdir()
    table = pa.table({"text": [f"document {i}" for i in range(20)], "label": [i % 2 for i in range(20)]})
    pq.write_table(table, folder / "train.parquet")
    make = getattr(lightning_order, module)
    first = make(dataset=str(folder), cache_dir=str(tmp_path / "c"))
    assert make(dataset=str(folder), cache_dir=str(tmp_path / "c")).cache_key == first.cache_key
    pq.write_table(table.slice(0, 10), folder / "train.parquet")  # other rows, same name
    assert make(dataset=str(folder), cache_dir=str(tmp_path / "c")).cache_key != first.cache_key


def test_a_pipe_in_data_files_is_refused_not_identified_by_its_name(tmp_path):
    pipe = tmp_path / "docs.txt"
    os.mkfifo(pipe)  # reading it to hash it would wait for a writer for ever
    with pytest.raises(DataError) as info:
        DataConfig(dataset="text", data_files=str(pipe))
    assert info.value.step == "load" and f"{pipe}, which is not a regular file" in str(info.value)


def test_a_dataset_folder_is_identified_by_the_names_inside_it_not_by_where_it_is(tmp_path):
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "here" / "my_dataset"
    folder.mkdir(parents=True)
    table = pa.table({"text": [f"document {i}" for i in range(20)], "label": [i % 2 for i in range(20)]})
    pq.write_table(table, folder / "train.parquet")
    first = OrderedDataModule(dataset=str(folder), **SMALL)
    copy = shutil.copytree(folder, tmp_path / "there" / "my_dataset")
    assert OrderedDataModule(dataset=str(copy), **SMALL).cache_key == first.cache_key  # issue #46
    (copy / "train.parquet").rename(copy / "test.parquet")  # datasets reads the split from the name
    assert OrderedDataModule(dataset=str(copy), **SMALL).cache_key != first.cache_key


def test_the_same_bytes_in_two_folders_have_one_key_unless_the_name_says_how_to_read_them(tmp_path):
    """Issue #46: the location leaves the key; a name ending that decides the read (``.tsv``: at tabs) stays."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    rows = "text\tlabel\nthe first row says good\t1\nthe second row says bad\t0\n" * 20
    for path in (tmp_path / "one" / "a.csv", tmp_path / "two" / "a.csv", tmp_path / "two" / "a.tsv"):
        path.write_text(rows)
    keys = {name: OrderedDataModule("csv", data_files=str(tmp_path / name), **SMALL).cache_key
            for name in ("one/a.csv", "two/a.csv", "two/a.tsv")}  # fmt: skip
    assert keys["one/a.csv"] == keys["two/a.csv"] != keys["two/a.tsv"]  # one column vs two
    assert files_identity([str(tmp_path / "two" / "a.tsv")])[0][2:] == [".tsv"]
