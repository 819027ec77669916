"""Which paths name object storage, and the config's ``storage_options``."""

from __future__ import annotations

import pytest

from lightning_order import OrderedLMDataModule
from lightning_order.data.engine.object_store import is_url
from lightning_order.errors import DataError


@pytest.mark.parametrize(
    ("path", "url"),
    [("s3://bucket/corpus.jsonl", True), ("gs://b/x", True), ("memory://x", True),
     ("file:///tmp/x", False), ("/tmp/s3:/x", False), ("data/corpus.jsonl", False), ("C:/x", False)],
)  # fmt: skip
def test_is_url(path: str, url: bool) -> None:
    assert is_url(path) is url


def test_storage_options_must_be_a_mapping_of_names() -> None:
    with pytest.raises(DataError, match="storage_options must be a mapping"):
        OrderedLMDataModule(storage_options=["key"])  # type: ignore[arg-type]
