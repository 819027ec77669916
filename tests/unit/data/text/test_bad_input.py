"""One line for every bad input: a lightning_order error naming the step, the file or column, expected vs got and the fix.

Every case also leaves no temporary folder and no cache folder behind.
"""

from __future__ import annotations

import errno
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lightning_order import DataError, LightningOrderError, OrderedDataModule
from lightning_order.data.engine import cache
from lightning_order.data.engine.runner import StepResult
from lightning_order.data.engine.storage import storage_error
from lightning_order.data.text import load as load_module
from lightning_order.data.text.steps import STEPS

SMALL = {"vocab_size": 100, "max_length": 16}
TINY_DEMO = {"demo_size": 300, "vocab_size": 100, "max_length": 16}


def _csv(path: Path, body: str, encoding: str = "utf-8") -> Path:
    path.write_bytes(body.encode(encoding))
    return path


def _good_rows(n: int = 60, labels: int = 2) -> str:
    return "text,label\n" + "".join(
        f"row {i} is {'good' if i % 2 else 'bad'},{i % labels}\n" for i in range(n)
    )


def zero_row_parquet(tmp: Path) -> dict:
    pq.write_table(
        pa.table({"text": pa.array([], pa.string()), "label": pa.array([], pa.int64())}), tmp / "a.parquet"
    )
    return {"dataset": "parquet", "data_files": str(tmp / "a.parquet")}


def header_only_csv(tmp: Path) -> dict:
    return {"dataset": "csv", "data_files": str(_csv(tmp / "a.csv", "text,label\n"))}


def latin1_csv(tmp: Path) -> dict:
    body = _good_rows(40) + "un café très bon,1\n" + _good_rows(20)[len("text,label\n") :]
    return {"dataset": "csv", "data_files": str(_csv(tmp / "a.csv", body, "latin-1"))}


def one_label_csv(tmp: Path) -> dict:
    return {"dataset": "csv", "data_files": str(_csv(tmp / "a.csv", _good_rows(60, labels=1)))}


def folder_without_csv(tmp: Path) -> dict:
    (tmp / "d").mkdir()
    (tmp / "d" / "readme.txt").write_text("hello")
    return {"dataset": "csv", "data_files": str(tmp / "d")}


# (case, when it is refused, step, file or column named, the words that matter)
LOADED = [
    (
        zero_row_parquet,
        "load",
        "a.parquet",
        ["holds 0 rows", "columns: text, label", "expected at least one row"],
    ),
    (header_only_csv, "load", "a.csv", ["has a header (text,label) but no rows", "add rows"]),
    (latin1_csv, "load", "a.csv", ["is not UTF-8", "byte 0xe9", "line 42", "re-encode", "iconv"]),
    (one_label_csv, "load", "label", ["at least 2 classes", "got 1", "num_classes=1"]),
]


@pytest.mark.parametrize(("case", "step", "named", "words"), LOADED, ids=[c[0].__name__ for c in LOADED])
def test_bad_input_files_are_one_data_error_naming_the_file(tmp_path, case, step, named, words):
    kwargs = case(tmp_path)
    dm = OrderedDataModule(cache_dir=str(tmp_path / "c"), **kwargs, **SMALL)
    with pytest.raises(DataError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert info.value.step == step and named in message
    assert all(w in message for w in words), message
    assert "\n" not in message and "DatasetGenerationError" not in message
    assert not list((tmp_path / "c").glob(".tmp-*")) and not dm.cache_path.exists()


CONSTRUCTED = [
    ({"vocab_size": 300.0}, "build_vocab", ["vocab_size must be an int", "300.0", "float", "vocab_size=300"]),
    ({"vocab_size": True}, "build_vocab", ["vocab_size must be an int", "True"]),
    ({"demo_size": 0}, "load", ["demo_size must be an int >= 1", "got 0", "demo_size=2000"]),
    ({"demo_size": -5}, "load", ["demo_size must be an int >= 1", "got -5", "dataset="]),
    ({"max_length": True}, "encode", ["max_length must be an int", "True", "a bool is not an int"]),
    ({"input_hash": "fast"}, "load", ["input_hash must be one of", "'fast'", "size_mtime"]),
]


@pytest.mark.parametrize(("kwargs", "step", "words"), CONSTRUCTED, ids=[str(c[0]) for c in CONSTRUCTED])
def test_bad_arguments_are_refused_at_construction(tmp_path, kwargs, step, words):
    with pytest.raises(DataError) as info:
        OrderedDataModule(cache_dir=str(tmp_path), **kwargs)
    assert info.value.step == step
    assert all(w in str(info.value) for w in words), str(info.value)
    assert not list(tmp_path.iterdir())  # nothing was written


def test_a_folder_as_data_files_is_read_as_its_files(tmp_path):
    (tmp_path / "d").mkdir()
    _csv(tmp_path / "d" / "part1.csv", _good_rows(60))
    dm = OrderedDataModule("csv", data_files=str(tmp_path / "d"), cache_dir=str(tmp_path / "c"), **SMALL)
    assert dm.ledger.latest("load").stats["rows"] == 60


def test_a_folder_without_files_of_the_builder_says_what_is_expected(tmp_path):
    kwargs = folder_without_csv(tmp_path)
    with pytest.raises(DataError) as info:
        OrderedDataModule(cache_dir=str(tmp_path / "c"), **kwargs, **SMALL)
    assert info.value.step == "load"
    for words in ("names the folder", "holds no .csv/.tsv files", "expected a file, a glob"):
        assert words in str(info.value)


# -- the storage: a full disk, a read-only cache root, a file or link at the cache path -------------
def _enospc(path: str) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", path)


@pytest.fixture
def preparations(monkeypatch):
    calls = []
    real = load_module.make_demo_corpus
    monkeypatch.setattr(load_module, "make_demo_corpus", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_disk_full_inside_a_step_names_the_step_and_the_path(tmp_path):
    def full(ctx, state):
        try:
            raise _enospc(str(ctx.work / "hf" / "cache-1.arrow"))
        except OSError as err:  # datasets wraps it: the whole chain is searched
            raise datasets.exceptions.DatasetGenerationError("An error occurred") from err

    old = STEPS.replace("clean", full)
    try:
        dm = OrderedDataModule(cache_dir=str(tmp_path), **TINY_DEMO)
        with pytest.raises(DataError) as info:
            dm.prepare_data()
    finally:
        STEPS.replace("clean", old.fn)
    message = str(info.value)
    assert info.value.step == "clean"
    for words in (
        "no space left on the device",
        "cache-1.arrow",
        "[Errno 28]",
        "cache_dir",
        "LIGHTNING_ORDER_CACHE",
    ):
        assert words in message, message
    assert not list(tmp_path.glob(".tmp-*")) and not dm.cache_path.exists()


def test_disk_full_while_saving_names_the_save_step(tmp_path, monkeypatch):
    def full(part, path, *args, **kwargs):
        raise _enospc(str(Path(path) / "data-00000-of-00001.arrow"))

    # The encoded parts are published by lightning_order.data.engine.tables.save_part (a move, or
    # save_to_disk for parts that are not one scratch file of their own).
    monkeypatch.setattr(datasets.Dataset, "save_to_disk", full)
    monkeypatch.setattr("lightning_order.data.engine.tables.save_part", full)
    dm = OrderedDataModule(cache_dir=str(tmp_path), **TINY_DEMO)
    with pytest.raises(DataError) as info:
        dm.prepare_data()
    assert info.value.step == "save" and "no space left" in str(info.value) and ".tmp-" in str(info.value)
    assert not list(tmp_path.glob(".tmp-*")) and not dm.cache_path.exists()


@pytest.mark.parametrize("where", ["temp-folder", "lock", "root"])
def test_a_read_only_cache_root_names_the_path(tmp_path, monkeypatch, where):
    # Tests run as root, where chmod does not stop writes: the failing write is simulated.
    root = tmp_path / "ro"
    if where == "temp-folder":

        def read_only(root_, key):
            raise OSError(errno.EROFS, "Read-only file system", str(root_ / f".tmp-{key}"))

        monkeypatch.setattr(cache, "new_temp_dir", read_only)
    elif where == "lock":
        monkeypatch.setattr(
            cache,
            "cache_lock",
            lambda r, k: (_ for _ in ()).throw(
                PermissionError(errno.EACCES, "Permission denied", str(r / f"{k}.lock"))
            ),
        )
    else:
        root.write_text("a file where the cache root should be")
    dm = OrderedDataModule(cache_dir=str(root), **TINY_DEMO)
    with pytest.raises(LightningOrderError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert isinstance(info.value, DataError) and info.value.step == "prepare_data"
    assert str(root) in message and "cache_dir" in message, message
    if where == "temp-folder":
        assert "read-only" in message and "[Errno 30]" in message
    assert not list(tmp_path.glob("**/.tmp-*"))


@pytest.mark.parametrize("kind", ["file", "symlink", "dangling-symlink"])
def test_a_file_or_link_at_the_cache_path_is_refused_before_preparing(tmp_path, kind, preparations):
    dm = OrderedDataModule(cache_dir=str(tmp_path), **TINY_DEMO)
    if kind == "file":
        dm.cache_path.write_text("not a cache")
    else:
        target = tmp_path / "elsewhere"
        if kind == "symlink":
            target.mkdir()
        dm.cache_path.symlink_to(target)
    with pytest.raises(DataError) as info:
        dm.prepare_data()
    assert preparations == []  # refused before any work
    word = "file" if kind == "file" else "symbolic link"
    assert f"{dm.cache_path} is a {word}, not a prepared folder" in str(info.value)
    assert "remove it, or choose another cache_dir" in str(info.value)
    assert not list(tmp_path.glob(".tmp-*"))


def test_a_symlink_to_an_intact_cache_is_used(tmp_path, preparations):
    dm = OrderedDataModule(cache_dir=str(tmp_path / "real"), **TINY_DEMO)
    dm.prepare_data()
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / dm.cache_key).symlink_to(dm.cache_path)
    again = OrderedDataModule(cache_dir=str(tmp_path / "linked"), **TINY_DEMO)
    assert again.dims == dm.dims and len(preparations) == 1  # verified, then reused


def test_storage_errors_keep_other_errors_as_they_are(tmp_path):
    def broken(ctx, state):
        raise StepResult  # a TypeError: not about storage

    old = STEPS.replace("clean", broken)
    try:
        dm = OrderedDataModule(cache_dir=str(tmp_path), **TINY_DEMO)
        with pytest.raises(TypeError):
            dm.prepare_data()
    finally:
        STEPS.replace("clean", old.fn)
    assert not list(tmp_path.glob(".tmp-*"))


def test_storage_error_reads_the_whole_chain_and_only_cache_writes():
    full = OSError(errno.ENOSPC, "No space left on device", "/cache/.tmp-k/train/x.arrow")
    try:
        try:
            raise full
        except OSError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        wrapped = outer
    error = storage_error(wrapped, "encode", "/cache/.tmp-k")
    assert error.step == "encode" and "x.arrow" in str(error) and "[Errno 28]" in str(error)
    denied_input = PermissionError(errno.EACCES, "Permission denied", "/data/a.csv")
    assert storage_error(denied_input, "load", "/cache/.tmp-k") is None  # a read problem, not the cache's
    assert storage_error(ValueError("no"), "load", "/cache") is None
