"""The fast (Arrow-vectorised) preparation gives exactly what the per-row ``datasets.map`` path gave.

``tests/golden/data_fast.json`` was recorded on the per-row implementation (before issue 13):
for each case, the ledger (every record's inputs, output, parts, params and stats but the
per-step ``seconds``), the data fingerprints, the dims, the tokenizer's hash, and an xxh3 hash of
every column of both encoded splits. The cases: the demo corpus (default settings; and
``lowercase=False`` with BPE and three sources), a csv of hostile text (entities the fast path
cannot replace, unicode whose case or NFKC form is not ASCII, control and unicode spaces,
newlines, empty rows) prepared with the default ``clean`` and a group column, and the same csv
with a user-overridden ``clean`` (the pure-Python fallback) followed by the default features.

Re-record (only when a change of the outputs is intended, with ``CODE_VERSION`` bumped; or when
only the step fingerprints change, as they did when they came to follow the declared config fields
(issue 44): then check that ``cache_key``, ``dims``, ``tokenizer`` and ``parts`` are unchanged)::

    PYTHONPATH=$PWD:$PWD/tests python tests/unit/data/text/test_arrow.py --record
"""

from __future__ import annotations

import csv
import json
import os
import random
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import xxhash
from helpers import TESTS

from lightning_order import OrderedDataModule
from lightning_order.data.engine.keys import is_val, key_hash_array, key_hashes
from lightning_order.data.text import arrow
from lightning_order.data.text.arrow import clean_array, text_features
from lightning_order.data.text.demo import demo_rows
from lightning_order.data.text.features import engineer_batch
from lightning_order.data.text.normalise import clean_text

GOLDEN = TESTS / "golden" / "data_fast.json"

_HOSTILE = [
    "Caf\u00e9 &eacute;t\u00e9 &copy 2024 &#x41;&#66; &amp;lt;tag&amp;gt; done",
    "\u0130stanbul STRASSE Stra\u00dfe \u03a3\u039f\u03a3 \u1e9e end",
    "tabs\tand\nnew\r\nlines\x0bvt\x1cfs \u2003em\u3000ideo\u00a0nbsp",
    "<b>bold</b> <a href='x'>link</a> <<nested>> < lone &lt;br&gt; ok",
    "wow!!! ?? !?!? ...,,;; ::-- __** ~~== ##ing ###x",
    "\uff26\uff55\uff4c\uff4c width \ufb01ne \ufb02ow \u2460 \u00bd \u2126",
    "   ",
    "<p></p>",
    "emoji \U0001f600\U0001f600 and \u0301combining e\u0301 ok",
    "&unknownentity; &; & alone &amp &lt3 &#0; &#xD800; &#1114112;",
]


def _write_csv(path: Path, rows: int = 700) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["text", "label", "score", "group"])
        writer.writeheader()
        for i, row in enumerate(demo_rows(rows, seed=3)):
            text = row["text"]
            if i % 7 == 0:
                text = _HOSTILE[(i // 7) % len(_HOSTILE)] + " " + text
            if i % 50 == 0:
                text = _HOSTILE[(i // 50) % len(_HOSTILE)]
            if i % 101 == 13:  # long rows: encode_bounded encodes a prefix
                text = " ".join([text] * 40) if i % 2 else "x" * 6000 + " " + text
            writer.writerow({"text": text, "label": row["label"], "score": row["score"], "group": i % 97})


def _fixed_csv() -> str:
    """The hostile csv at a fixed path (written atomically: concurrent test runs write the same bytes)."""
    folder = Path(tempfile.gettempdir()) / "lightning_order_test_data_fast"
    folder.mkdir(exist_ok=True)
    path = folder / "hostile.csv"
    tmp = folder / f".hostile-{os.getpid()}-{uuid.uuid4().hex[:8]}.csv"
    _write_csv(tmp)
    os.replace(tmp, path)
    return str(path)


class _OwnClean(OrderedDataModule):
    """A user's own ``clean``: unescaping only, title case, digits dropped (the fallback path)."""

    def clean(self, batch):
        import html

        batch[self.text_column] = [
            " ".join(html.unescape(t).title().replace("1", "").split()) for t in batch[self.text_column]
        ]
        return batch


def _cases(root: Path) -> dict[str, OrderedDataModule]:
    # The load fingerprint hashes the csv's absolute path: the csv lives at a fixed path.
    data = _fixed_csv()
    cache = str(root / "cache")
    small = {"vocab_size": 400, "max_length": 24, "cache_dir": cache}
    return {
        "demo": OrderedDataModule(demo_size=1500, **small),
        "demo_cased_bpe": OrderedDataModule(
            demo_size=1200, lowercase=False, tokenizer="bpe", demo_sources=3, **small
        ),
        "csv_default_group": OrderedDataModule(
            "csv", data_files=data, numeric_columns=["score"], group_column="group", **small
        ),
        "csv_own_clean": _OwnClean("csv", data_files=data, numeric_columns=["score"], **small),
    }


def _column_hash(column: Any) -> str:
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    while pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type):
        column = column.flatten()
    digest = xxhash.xxh3_128()
    digest.update(str(len(column)).encode())
    digest.update(column.to_numpy(zero_copy_only=False).tobytes())
    return digest.hexdigest()


def snapshot(dm: OrderedDataModule) -> dict[str, Any]:
    """What the faster paths must reproduce exactly (plain JSON data)."""
    import datasets

    dm.prepare_data()
    ledger = dm.ledger
    records = []
    for record in ledger:
        entry = record.to_dict()
        entry["stats"] = {k: v for k, v in entry["stats"].items() if k != "seconds"}
        records.append(
            {k: entry[k] for k in ("step", "inputs", "output", "fitted_on", "parts", "params", "stats")}
        )
    parts = {}
    for name in ("train", "val"):
        table = datasets.load_from_disk(str(dm.cache_path / name)).data.table
        parts[name] = {
            "rows": table.num_rows,
            "schema": [f"{f.name}: {f.type}" for f in table.schema],
            "columns": {c: _column_hash(table[c]) for c in table.column_names},
        }
    return {
        "cache_key": dm.cache_key,
        "ledger_fingerprint": ledger.fingerprint,
        "data_fingerprints": dm.data_fingerprints(),
        "dims": dm.dims,
        "tokenizer": xxhash.xxh3_128_hexdigest(dm.tokenizer.to_str().encode()),
        "records": records,
        "parts": parts,
    }


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return _snapshots(tmp_path_factory.mktemp("fast"))


def _snapshots(root: Path) -> dict[str, dict[str, Any]]:
    return {name: snapshot(dm) for name, dm in _cases(root).items()}


@pytest.mark.parametrize("case", ["demo", "demo_cased_bpe", "csv_default_group", "csv_own_clean"])
def test_same_fingerprints_ledger_and_rows_as_the_per_row_path(snapshots, case):
    got, want = snapshots[case], _golden()[case]
    assert got["records"] == want["records"]
    for key in ("cache_key", "ledger_fingerprint", "data_fingerprints", "dims", "tokenizer"):
        assert got[key] == want[key], key
    assert got["parts"] == want["parts"]


def test_many_small_batches_on_threads_give_the_same_outputs(tmp_path, monkeypatch):
    # The vectorised steps read batches of BATCH_ROWS and run them on num_proc threads, in order.
    from lightning_order.data.engine import tables

    monkeypatch.setattr(tables, "BATCH_ROWS", 97)
    dm = OrderedDataModule(demo_size=1500, vocab_size=400, max_length=24, num_proc=3, cache_dir=str(tmp_path))
    got, want = snapshot(dm), _golden()["demo"]
    assert got["records"] == want["records"] and got["parts"] == want["parts"]


def test_ordered_map_keeps_the_order_and_raises_the_first_error():
    from lightning_order.data.engine.tables import ordered_map

    assert list(ordered_map(lambda x: x * x, range(50), workers=3)) == [x * x for x in range(50)]

    def fail_at_7(x):
        if x == 7:
            raise ValueError(x)
        return x

    with pytest.raises(ValueError, match="7"):
        list(ordered_map(fail_at_7, range(20), workers=2))


def test_key_hash_is_of_the_cleaned_key_when_cleaning_runs_after_the_split(tmp_path):
    # The split carries its key hashes to encode only while the data is the split's; here clean
    # runs after the split (enforce=False), so encode hashes the cleaned text itself.
    import datasets

    order = ["load", "split", "clean", "engineer_features", "fit_features", "build_vocab", "encode", "shard"]
    dm = OrderedDataModule(
        demo_size=400, vocab_size=200, max_length=16, cache_dir=str(tmp_path), order=order, enforce=False
    )
    dm.prepare_data()
    cleaned = [t for t in (clean_text(r["text"]) for r in demo_rows(400)) if t]
    assert dm.ledger.steps()[:3] == ["load", "split", "clean"]
    for part in ("train", "val"):
        stored = datasets.load_from_disk(str(dm.cache_path / part))["key_hash"]
        assert set(stored) <= set(key_hashes(cleaned, text=True).tolist())


_KERNEL_TEXTS = [
    *_HOSTILE,
    "a\u0130b&amp;c",
    "x\u00df &amp;&lt; y",
    "&amp;amp;lt; &amp;lt;",
    "<b\n>x",
    "a" * 300 + "<" + "b" * 250 + ">",
    " lead and trail ",
    "double  space",
    "",
    "plain words only",
    "\uff41\u0301 \ufb01\u0301 full-width and ligature before a combining mark",
    "\u00a0",
    "\uff21\uff3a\uff10\uff19\uff01\uff5e\u00a0\ufb01x\ufb02y\u00a0",
    "\uff00\uff5f\ufb00\ufb03 neighbours of the mapped ranges",
    "caf\u00e9\u00a0\uff43\uff41\uff46\u00e9",
    *("".join(chr(random.Random(i).randrange(1, 0x3000)) for _ in range(40)) for i in range(300)),
]


@pytest.mark.parametrize("lowercase", [True, False])
def test_clean_array_is_clean_text(lowercase):
    got = clean_array(pa.array(_KERNEL_TEXTS), lowercase).to_pylist()
    assert got == [clean_text(t, lowercase) for t in _KERNEL_TEXTS]


@pytest.mark.parametrize("cleaned", [True, False])
def test_text_features_are_engineer_batch(cleaned):
    texts = [clean_text(t) for t in _KERNEL_TEXTS] if cleaned else _KERNEL_TEXTS
    got = text_features(pa.array(texts))
    want = engineer_batch({"text": list(texts)}, "text", [])
    for name, values in got.items():
        assert values.tolist() == want[name], name


def test_key_hashes_are_the_per_row_ones():
    array = pa.array(_KERNEL_TEXTS)
    assert (key_hash_array(array, text=True).view(np.int64) == key_hashes(_KERNEL_TEXTS, text=True)).all()
    flags = (key_hash_array(array, text=True, seed=5) % (1 << 20)).astype(np.int64) < round(0.3 * (1 << 20))
    assert (flags == is_val(_KERNEL_TEXTS, 0.3, 5, text=True)).all()


def _space_class(but: str = "") -> str:
    """An RE2 character class of every code point ``str.isspace`` accepts but those in ``but``."""
    points = [c for c in range(0x110000) if chr(c).isspace() and chr(c) not in but]
    ranges, start = [], points[0]
    for prev, cur in zip(points, [*points[1:], None]):
        if cur != prev + 1:
            ranges.append(f"\\x{{{start:x}}}" + (f"-\\x{{{prev:x}}}" if prev != start else ""))
            start = cur
    return "[" + "".join(ranges) + "]"


def test_the_space_class_is_pythons():
    assert _space_class() == arrow._SPACE and _space_class(but=" ") == arrow._SPACE_BUT_BLANK


def _record(path: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = _snapshots(Path(tmp))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"recorded {', '.join(out)} into {path}")


if __name__ == "__main__":
    if "--record" in sys.argv:
        _record(GOLDEN)
