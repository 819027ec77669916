"""Issue #35: an input file is hashed once per machine, and any write since is still seen.

Before, every process that built a DataModule hashed every input file (each rank of a run read
the whole corpus at ``setup``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import lightning_order
from lightning_order.data.engine import input_digests
from lightning_order.data.engine.input_digests import input_digest, record_path
from lightning_order.data.engine.storage import file_digest

#: The file systems whose files are never recorded (the ``hashed`` fixture empties it).
UNRECORDED = getattr(input_digests, "UNRECORDED_FILE_SYSTEMS", frozenset({"tmpfs"}))


@pytest.fixture
def hashed(monkeypatch):
    """Every file the digests read, in order (records trusted at once: no racy window).

    The records' rule is the subject: ``tmp_path`` on tmpfs (some machines' ``/tmp``) counts as a disk.
    """
    monkeypatch.setattr(input_digests, "RACY_WINDOW_NS", 0)
    monkeypatch.setattr(input_digests, "UNRECORDED_FILE_SYSTEMS", frozenset())
    seen: list[Path] = []
    real = input_digests.file_digest
    monkeypatch.setattr(input_digests, "file_digest", lambda path: seen.append(Path(path)) or real(path))
    return seen


def _file(path: Path, text: str = "one document\nanother document\n") -> Path:
    path.write_text(text)
    return path


def test_a_file_is_read_once_and_its_record_serves_later_processes(tmp_path, hashed):
    data = _file(tmp_path / "a.txt")
    first = input_digest(data, tmp_path / "records")
    second = input_digest(data, tmp_path / "records")
    assert first == second == file_digest(data)
    assert hashed == [data]
    assert record_path(data, tmp_path / "records").is_file()


@pytest.mark.parametrize("change", ["same-size-same-mtime", "replaced-by-a-copy", "appended"])
def test_any_write_since_the_record_sends_the_file_to_be_hashed_again(tmp_path, hashed, change):
    data = _file(tmp_path / "a.txt")
    before = input_digest(data, tmp_path / "records")
    info = data.stat()
    if change == "same-size-same-mtime":  # only the change time (and the bytes) tell
        _file(data, "One document\nanother document\n")
        os.utime(data, ns=(info.st_atime_ns, info.st_mtime_ns))
    elif change == "replaced-by-a-copy":  # a new inode with the old size and times
        copy = _file(tmp_path / "b.txt", "One document\nanother document\n")
        shutil.copystat(data, copy)
        os.replace(copy, data)
    else:
        with open(data, "a") as handle:
            handle.write("more\n")
    after = input_digest(data, tmp_path / "records")
    assert after == file_digest(data) != before
    assert hashed == [data, data]


def test_a_file_written_within_the_racy_window_is_hashed_every_time(tmp_path, monkeypatch):
    data = _file(tmp_path / "a.txt")  # written now: inside the default 2 s window
    seen: list[Path] = []
    real = input_digests.file_digest
    monkeypatch.setattr(input_digests, "file_digest", lambda path: seen.append(Path(path)) or real(path))
    input_digest(data, tmp_path / "records")
    input_digest(data, tmp_path / "records")
    assert seen == [data, data]
    assert not record_path(data, tmp_path / "records").exists()


@pytest.mark.parametrize("record", ["not json", {"format": "other"}, "another path", "another digest type"])
def test_a_record_that_does_not_name_this_file_is_not_trusted(tmp_path, hashed, record):
    data = _file(tmp_path / "a.txt")
    input_digest(data, tmp_path / "records")
    path = record_path(data, tmp_path / "records")
    good = json.loads(path.read_text())
    if record == "not json":
        path.write_text("{")
    elif record == "another path":
        path.write_text(json.dumps({**good, "path": str(tmp_path / "b.txt"), "xxh3": "0" * 32}))
    elif record == "another digest type":
        path.write_text(json.dumps({**good, "xxh3": 7}))
    else:
        path.write_text(json.dumps(record))
    assert input_digest(data, tmp_path / "records") == file_digest(data)
    assert hashed == [data, data]


def test_a_records_folder_that_cannot_be_written_still_gives_the_digest(tmp_path, hashed):
    data = _file(tmp_path / "a.txt")
    blocked = tmp_path / "records"
    blocked.write_text("a file where the folder would be")
    assert input_digest(data, blocked) == file_digest(data)
    assert input_digest(data, blocked) == file_digest(data)
    assert hashed == [data, data]


def test_a_second_datamodule_of_the_same_input_reads_none_of_it(tmp_path, hashed):
    """What every rank of a run does at ``setup``: build the DataModule and compute the cache key."""
    data = _file(tmp_path / "a.txt", "".join(f"document {i} of the corpus\n" for i in range(50)))
    keys = []
    for _ in range(2):
        dm = lightning_order.OrderedLMDataModule("text", data_files=str(data), cache_dir=str(tmp_path / "c"))
        keys.append(dm.cache_path)
    assert keys[0] == keys[1]
    assert hashed == [data.resolve()]


def _tmpfs_folder() -> Path | None:
    shm = Path("/dev/shm")  # tmpfs on Linux
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


@pytest.mark.skipif(_tmpfs_folder() is None, reason="needs a writable tmpfs at /dev/shm")
def test_a_write_through_a_shared_mmap_on_tmpfs_is_seen(tmp_path, hashed, monkeypatch):
    """Issue #42 item 4: on tmpfs such a write leaves every stat field as it was; the record served the old digest."""
    import mmap
    import tempfile

    monkeypatch.setattr(input_digests, "UNRECORDED_FILE_SYSTEMS", UNRECORDED)  # the real rule here
    folder = Path(tempfile.mkdtemp(dir=_tmpfs_folder()))
    try:
        data = _file(folder / "a.txt")
        before = data.stat()
        old = input_digest(data, tmp_path / "records")
        with open(data, "r+b") as handle, mmap.mmap(handle.fileno(), 0) as view:
            view[0:3] = b"ONE"
            view.flush()
        # Linux's tmpfs updates no time for a write through a shared map (some kernels, e.g. a
        # sandbox's, do): the status is made the one Linux gives, the bytes are the new ones.
        real = Path.stat
        monkeypatch.setattr(Path, "stat", lambda self, **kw: before if self == data else real(self, **kw))
        new = input_digest(data, tmp_path / "records")
        assert new == file_digest(data) != old
        assert hashed == [data, data]  # never served from a record on tmpfs
        assert not record_path(data, tmp_path / "records").exists()
        dm = lightning_order.OrderedLMDataModule("text", data_files=str(data), cache_dir=str(tmp_path / "c"))
        assert dm.config.input_identity[0][1] == f"xxh3:{new}" and hashed[2:] == [data]  # a new DataModule re-hashes
        assert input_digests.file_system(data) == "tmpfs"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_file_system_of_a_path_is_read_from_mountinfo(tmp_path):
    from lightning_order.data.engine.input_digests import file_system

    if not Path("/proc/self/mountinfo").exists():
        pytest.skip("no /proc/self/mountinfo")
    assert file_system(Path("/proc/self/mountinfo")) == "proc"
    assert file_system(tmp_path) not in (None, "proc")


@pytest.mark.parametrize(
    "error",
    [PermissionError(13, "Permission denied"), OSError(5, "Input/output error")],
    ids=["permission", "eio"],
)
def test_an_input_stat_accepts_and_read_refuses_is_a_data_error_naming_it(tmp_path, monkeypatch, error):
    """Issue #42 item 4: the content hash at construction raised a raw ``PermissionError`` / ``EIO``."""
    data = _file(tmp_path / "a.txt")

    def refuse(path):
        raise error

    monkeypatch.setattr(input_digests, "file_digest", refuse)
    with pytest.raises(lightning_order.DataError, match="could not be read") as info:
        lightning_order.OrderedLMDataModule("text", data_files=str(data), cache_dir=str(tmp_path / "c"))
    message = str(info.value)
    assert str(data) in message and info.value.step == "load" and "\n" not in message
    assert error.strerror in message
