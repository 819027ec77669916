"""``data.engine.preparation``: a pipeline's preparation from its declarations, and its manifest in one call.

``write_manifest`` makes a folder a cache the library verifies (every file hashed, the ledger's
fingerprint among the data fingerprints); ``config_cache_key`` follows every field that shapes
the data and none that serves; ``PipelinePreparation`` refuses steps no pipeline orders.
The whole path (prepare, fit, audit, graph) runs in tests/integration/test_third_pipeline.py.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path

import pytest

from lightning_order import (
    BaseDataConfig,
    DataError,
    PipelinePreparation,
    StepLedger,
    StepRegistry,
    config_cache_key,
    write_manifest,
)
from lightning_order.data.engine.cache import cache_problems


@dataclass(frozen=True)
class _Config(BaseDataConfig):
    rows: int = 10
    """rows."""


def _ledger() -> StepLedger:
    ledger = StepLedger(info={"cache_key": "k"})
    ledger.record("load", inputs={}, output="a" * 32)
    return ledger


def test_write_manifest_lists_every_file_so_the_folder_is_verified(tmp_path: Path) -> None:
    (tmp_path / "train.npz").write_bytes(b"rows")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "scratch").write_bytes(b"removed after writing")
    ledger = _ledger()
    path = write_manifest(tmp_path, ledger, {"num_inputs": 1}, {"split": "s"}, label_names=["a"])
    saved = StepLedger.load(tmp_path)
    assert path.parent == tmp_path and saved.info["dims"] == {"num_inputs": 1}
    assert saved.info["data_fingerprints"] == {"manifest": ledger.fingerprint, "split": "s"}
    assert set(saved.info["files"]) == {"train.npz"} and saved.info["label_names"] == ["a"]
    assert cache_problems(tmp_path, "k") == []
    (tmp_path / "train.npz").write_bytes(b"ROWS")  # same size, other bytes
    problems = cache_problems(tmp_path, "k")
    assert len(problems) == 1 and problems[0].startswith("train.npz")


def test_write_manifest_on_a_full_disk_is_one_data_error_naming_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(self: StepLedger, path: Path) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(StepLedger, "save", full)
    with pytest.raises(DataError) as caught:
        write_manifest(tmp_path, _ledger(), {})
    assert caught.value.step == "save" and "no space left" in str(caught.value)


def test_the_default_cache_key_follows_the_fields_that_shape_the_data() -> None:
    order = ("load", "shard")
    key = config_cache_key("toy", _Config(), order)
    assert key == config_cache_key("toy", _Config(), order)
    assert key != config_cache_key("toy", _Config(rows=11), order)  # a field of the pipeline's own
    assert key != config_cache_key("other", _Config(), order)  # two pipelines never share a key
    assert key != config_cache_key("toy", _Config(), ("load",))
    assert key == config_cache_key("toy", _Config(batch_size=7, cache_dir="/elsewhere"), order)  # they serve


def test_a_preparation_needs_steps_bound_to_a_pipeline() -> None:
    class Mine(PipelinePreparation):
        def write(self, folder, state, ledger):  # type: ignore[no-untyped-def]
            return {}

    with pytest.raises(TypeError, match="StepRegistry bound to its Pipeline"):
        Mine("mine", _Config, StepRegistry())
