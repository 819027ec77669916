"""#46 item 4: what a run writes beside itself (:mod:`lightning_order.outputs`) on an S3 API server."""

from __future__ import annotations

import fsspec

from lightning_order.outputs import OWNERSHIP_FILE, write_owned_folder


def _listing(url: str) -> list[str]:
    fs = fsspec.filesystem("s3")
    fs.invalidate_cache()
    return sorted(
        path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1] for path in fs.find(url.rsplit("/", 1)[0])
    )


def test_the_tokenizer_folder_is_written_and_replaced_on_the_server(s3_bucket):
    """Written, written again with the same content (kept), with another (replaced), no folder left aside."""
    url = f"s3://{s3_bucket}/runs/ckpt/tokenizer"
    fs = fsspec.filesystem("s3")
    for files in ({"tokenizer.json": b"1", "config.json": b"2"},) * 2 + (
        {"tokenizer.json": b"3", "config.json": b"2"},
    ):
        assert write_owned_folder(url, files) == url
        assert fs.cat_file(f"{url}/tokenizer.json") == files["tokenizer.json"]
        assert _listing(url) == [
            "tokenizer/config.json",
            f"tokenizer/{OWNERSHIP_FILE}",
            "tokenizer/tokenizer.json",
        ]
