"""``lightning_order.data.engine.reading``: what both pipelines refuse before ``datasets`` reads a file."""

from __future__ import annotations

from pathlib import Path

import pytest

import lightning_order
from lightning_order import DataError


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
