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
