"""Workers read their own ranges (issue #35 item 1): the documents ``datasets.load_dataset`` gives, cut anywhere.

Each reader is compared with ``datasets.load_dataset`` on files written here (CRLF, no final
newline, empty lines, a byte order mark, Unicode line separators inside lines, a very long line,
null and absent values, escapes), with ranges small enough that boundaries fall inside records
and exactly on newlines. Bad input names the file and where, as on ``datasets``' path.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lightning_order import DataError
from lightning_order.data.lm.file_ranges import plan_ranges
from lightning_order.data.lm.range_reading import range_bytes, read_range, read_texts

SIZES = [1, 2, 7, 64, 1 << 20]


def _datasets(tmp_path: Path, dataset: str, path: Path, **options) -> list:
    import datasets

    data = datasets.load_dataset(
        dataset, data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"), **options
    )
    return data["text"]


def _ranges(dataset: str, path: Path, size: int, sample_by: str = "line") -> list:
    cfg = SimpleNamespace(dataset=dataset, text_column="text", sample_by=sample_by)
    texts: list = []
    for fr in plan_ranges(cfg, [path], size):
        texts += read_texts(fr)[0].to_pylist()
    return texts


def _hostile_jsonl(path: Path) -> Path:
    rows = [
        {"text": "first\u2028line\u2029sep\x85nel\x0bvt\x0cff\x1cfs"},
        {"text": None},
        {"other": 1},
        {"text": "crlf\r\ninside"},
        {"text": "é" * 5000 + "long"},
        {"text": ""},
    ]
    lines = [json.dumps(r, ensure_ascii=False).encode() for r in rows]
    lines.insert(3, b'{"text": "\\u00e9scaped \\ud83d\\ude00 \\n newline"}')
    body = b"\xef\xbb\xbf" + b"\r\n".join(lines) + b"\n\n  \n" + b'{"text": "no final newline"}'
    path.write_bytes(body)
    return path


def test_json_lines_read_in_ranges_are_the_documents_datasets_reads(tmp_path):
    path = _hostile_jsonl(tmp_path / "docs.jsonl")
    expected = _datasets(tmp_path, "json", path)
    assert len(expected) == 8 and None in expected
    for size in SIZES:
        assert _ranges("json", path, size) == expected, size


@pytest.mark.parametrize("sample_by", ["line", "paragraph", "document"])
def test_text_files_read_in_ranges_are_the_documents_datasets_reads(tmp_path, sample_by):
    path = tmp_path / "docs.txt"
    text = (
        "\ufeffone\r\ntwo\u2028still two\rthree\n\n\npara\x0b\x1c\x85graph\n\u00e9\n\n" + "x" * 5000 + "\nend"
    )
    path.write_bytes(text.encode())
    expected = _datasets(tmp_path, "text", path, sample_by=sample_by, keep_linebreaks=True)
    for size in SIZES:
        assert _ranges("text", path, size, sample_by) == expected, size


def test_every_record_belongs_to_exactly_one_range_wherever_the_file_is_cut(tmp_path):
    path = tmp_path / "lines.txt"
    data = b"a\nbb\n\nccc\r\nd\n\n\neeee"
    path.write_bytes(data)
    for cut in range(len(data) + 1):
        assert range_bytes(path, 0, cut) + range_bytes(path, cut, len(data)) == data, cut
    for cut in range(1, len(data)):  # a range owns the records that start in it, whole
        owned = range_bytes(path, cut, len(data))
        assert owned == b"" or data[data.index(owned) - 1 : data.index(owned)] == b"\n"


def test_parquet_runs_of_row_groups_are_the_documents_datasets_reads(tmp_path):
    path = tmp_path / "docs.parquet"
    texts = [f"document {i} " * (i % 7) if i % 5 else None for i in range(1000)]
    pq.write_table(pa.table({"text": texts, "n": list(range(1000))}), path, row_group_size=90)
    cfg = SimpleNamespace(dataset="parquet", text_column="text", sample_by="line")
    assert len(plan_ranges(cfg, [path], 1)) == 12  # one row group an item
    assert len(plan_ranges(cfg, [path], 1 << 20)) == 1
    assert (
        _ranges("parquet", path, 1)
        == _ranges("parquet", path, 1 << 20)
        == _datasets(tmp_path, "parquet", path)
    )


def test_a_range_writes_its_texts_and_returns_counts_only(tmp_path):
    path = _hostile_jsonl(tmp_path / "docs.jsonl")
    cfg = SimpleNamespace(dataset="json", text_column="text", sample_by="line")
    (fr,) = plan_ranges(cfg, [path], 1 << 20)
    found = read_range({"range": fr, "out": tmp_path / "out"})
    assert set(found) == {"path", "rows", "nulls", "text_bytes", "absent"}
    assert (found["rows"], found["nulls"], found["absent"]) == (8, 2, False)
    assert Path(found["path"]).is_file()


@pytest.mark.parametrize(
    ("tail", "words"),
    [
        (b'{"text": "caf\xe9"}\n', "is not UTF-8: byte 0xe9 at offset"),
        (b'{"text": "fine"}\n{"text": "broken\n', "line 42"),
        (b'{"text": 5}\n', "different kinds"),
    ],
    ids=["not-utf8", "broken-line", "number"],
)
def test_bad_input_in_a_later_range_names_the_file_and_where(tmp_path, tail, words):
    path = tmp_path / "docs.jsonl"
    path.write_bytes(b"".join(json.dumps({"text": f"doc {i}"}).encode() + b"\n" for i in range(40)) + tail)
    cfg = SimpleNamespace(dataset="json", text_column="text", sample_by="line")
    ranges = plan_ranges(cfg, [path], 100)
    assert len(ranges) > 5
    with pytest.raises(DataError, match=words) as info:
        for fr in ranges:
            read_range({"range": fr, "out": tmp_path / "out"})
    assert str(path) in str(info.value) and info.value.step == "load" and "\n" not in str(info.value)


def test_a_parquet_text_column_of_numbers_is_refused_naming_the_file_and_column(tmp_path):
    path = tmp_path / "numbers.parquet"
    pq.write_table(pa.table({"text": list(range(10))}), path)
    cfg = SimpleNamespace(dataset="parquet", text_column="text", sample_by="line")
    (fr,) = plan_ranges(cfg, [path])
    with pytest.raises(DataError, match="different kinds") as info:
        read_range({"range": fr, "out": tmp_path / "out"})
    assert str(path) in str(info.value) and info.value.column == "text"


def test_a_json_line_of_3_mib_is_read_as_datasets_reads_it(tmp_path):
    """Issue #42 item 4: a line longer than pyarrow's JSON block was refused as "straddling"."""
    path = tmp_path / "long.jsonl"
    rows = [{"text": "short"}, {"text": "word " * (3 << 18)}, {"text": "after"}]  # 3.75 MiB in the middle
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    expected = [r["text"] for r in rows]
    assert _datasets(tmp_path, "json", path) == expected
    for size in (1 << 20, 64 << 20):  # the long line cut by ranges, and whole in one range
        assert _ranges("json", path, size) == expected


def test_a_dictionary_encoded_parquet_string_column_is_text(tmp_path):
    """Issue #42 item 4: ``dictionary<values=string>`` (pandas categoricals, Spark) was refused as "numbers"."""
    path = tmp_path / "dict.parquet"
    texts = ["one document", "another", "one document", None, "last"]
    for kind in (pa.string(), pa.large_string()):
        column = pa.array(texts, kind).dictionary_encode()
        pq.write_table(pa.table({"text": column}), path, row_group_size=2)
        assert pa.types.is_dictionary(pq.read_schema(path).field("text").type)
        assert _ranges("parquet", path, 1) == _datasets(tmp_path, "parquet", path) == texts


def _unreadable(monkeypatch, module, error: OSError) -> None:
    """``open`` in ``module`` refuses, as a file stat accepts and read refuses (root ignores chmod)."""
    monkeypatch.setattr(module, "open", lambda *args, **kwargs: (_ for _ in ()).throw(error), raising=False)


@pytest.mark.parametrize(
    "error",
    [PermissionError(13, "Permission denied"), OSError(5, "Input/output error")],
    ids=["permission", "eio"],
)
@pytest.mark.parametrize("dataset", ["json", "text"])
def test_a_file_stat_accepts_and_read_refuses_names_the_file_and_step(tmp_path, monkeypatch, error, dataset):
    """Issue #42 item 4: a raw ``PermissionError``, or an ``EIO`` with no file name, came out of the worker."""
    from lightning_order.data.lm import file_ranges, range_reading

    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(20)))
    cfg = SimpleNamespace(dataset=dataset, text_column="text", sample_by="line")
    (fr,) = plan_ranges(cfg, [path])
    _unreadable(monkeypatch, range_reading, error)
    with pytest.raises(DataError, match="could not be read") as info:
        read_range({"range": fr, "out": tmp_path / "out"})
    message = str(info.value)
    assert str(path) in message and info.value.step == "load" and "\n" not in message
    _unreadable(monkeypatch, file_ranges, error)  # the planner's look at the first bytes, too
    with pytest.raises(DataError, match="could not be read") as info:
        file_ranges.worker_files(
            SimpleNamespace(**vars(cfg), dataset_config=None, input_files=[str(path)], load_split="train")
        )
    assert str(path) in str(info.value)


def test_a_parquet_file_read_refuses_names_the_file(tmp_path, monkeypatch):
    import pyarrow.parquet

    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": ["a", "b"]}), path)
    (fr,) = plan_ranges(SimpleNamespace(dataset="parquet", text_column="text", sample_by="line"), [path])

    def refuse(*args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(pyarrow.parquet.ParquetFile, "read_row_groups", refuse)
    with pytest.raises(DataError, match="could not be read") as info:
        read_range({"range": fr, "out": tmp_path / "out"})
    assert str(path) in str(info.value) and "\n" not in str(info.value)
