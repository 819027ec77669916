"""OrderedDataModule across processes: two DDP ranks on CPU, and prepare_data killed mid-way."""

from __future__ import annotations

import signal
from collections import Counter

import pytest
from ddp_utils import read_json, run_script, run_side_by_side

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data_ddp(tmp_path_factory):
    """One launch of data_ddp.py: what each rank wrote, a key per case (``default``,
    ``shard-before-normalize``), each case with its own cache."""
    root = tmp_path_factory.mktemp("data_ddp")
    out = root / "out"
    run_script("data_ddp.py", out, str(root / "cache"), timeout=400)
    return [read_json(out / f"rank{r}.json") for r in range(2)]


def _ranks(data_ddp, case):
    for rank, result in enumerate(data_ddp):
        assert case in result, f"rank {rank} did not reach case {case!r}: {result}"
        assert result[case]["rank"] == rank
    return [result[case] for result in data_ddp]


def test_two_ddp_ranks_get_equal_disjoint_shards_and_prepare_once(data_ddp):
    r0, r1 = _ranks(data_ddp, "default")
    assert r0["shard_info"]["world_size"] == r1["shard_info"]["world_size"] == 2
    # The global order: each rank reads 16 rows of every global batch of 2 × 16, the rest is dropped.
    assert r0["shard_info"]["length"] == r1["shard_info"]["length"] == r0["train_rows"] // 32 * 16
    assert r0["shard_info"]["dropped"] == r1["shard_info"]["dropped"] == r0["train_rows"] % 32
    assert r0["train_batches"] == r1["train_batches"] > 0
    # Disjoint parts of one split: together no key more often than the split holds it.
    assert not Counter(r0["key_hashes"]) + Counter(r1["key_hashes"]) - Counter(r0["train_keys"])
    assert r0["fingerprints"] == r1["fingerprints"]
    assert r0["pipeline_runs"] + r1["pipeline_runs"] == 1  # prepared once, under the lock
    assert r0["rules"] == r1["rules"] == []
    assert r0["ledger_steps"][-1] == "shard"


def test_two_ddp_ranks_shard_before_normalize(data_ddp):
    r0, r1 = _ranks(data_ddp, "shard-before-normalize")
    assert "shard-before-normalize" in r0["rules"] and "shard-before-normalize" in r1["rules"]
    assert r0["fingerprints"]["statistics"] != r1["fingerprints"]["statistics"]
    assert r0["fingerprints"]["split"] == r1["fingerprints"]["split"]
    assert r0["fingerprints"]["vocab"] == r1["fingerprints"]["vocab"]


KILL_POINTS = ["load", "clean", "split", "build_vocab", "encode", "save", "publish"]


def test_prepare_killed_mid_way_then_rerun_matches_uninterrupted(tmp_path):
    # One process imports once and forks a child per kill point; the children run side by side,
    # each in its own cache (they are independent, and most of a fresh process is importing),
    # and SIGKILL themselves. It then runs the uninterrupted reference. The half-written folders
    # the children leave are then gathered into one cache, where a rerun, in a fresh process,
    # must ignore them all.
    run_script("data_prepare.py", tmp_path, "--kill-points", *KILL_POINTS, ranks=1)
    killed = read_json(tmp_path / "killed.json")
    reference = read_json(tmp_path / "ref" / "result.json")
    key = reference["cache_key"]
    root = tmp_path / "cache"
    root.mkdir()
    assert sorted(killed) == sorted(KILL_POINTS)
    for point in KILL_POINTS:
        stderr = (tmp_path / point / "stderr.txt").read_text()
        assert killed[point] == -signal.SIGKILL, (point, stderr[-2000:])
        own = tmp_path / f"cache-{point}"
        assert not (own / key).exists(), point  # nothing a later run would trust
        temporary = list(own.glob(f".tmp-{key}-*"))
        assert temporary, point  # the half-written folder stayed temporary
        for left in [*temporary, *own.glob("*.lock")]:
            left.replace(root / left.name)
    assert len(list(root.glob(f".tmp-{key}-*"))) >= len(KILL_POINTS)
    run_script("data_prepare.py", tmp_path / "again", str(root), ranks=1)
    again = read_json(tmp_path / "again" / "result.json")
    assert again.pop("prepared") and reference.pop("prepared")
    assert again == reference
    assert not list(root.glob(".tmp-*"))


def test_three_processes_preparing_one_cache_prepare_once_and_agree(tmp_path):
    root = tmp_path / "cache"
    runs = [(tmp_path / f"p{i}", [str(root)]) for i in range(3)]
    for proc in run_side_by_side("data_prepare.py", runs):
        assert proc.returncode == 0, proc.stderr[-2000:]
    results = [read_json(tmp_path / f"p{i}" / "result.json") for i in range(3)]
    assert sum(r.pop("prepared") for r in results) == 1  # one prepared under the lock, the others reused
    assert results[0] == results[1] == results[2]
    assert not list(root.glob(".tmp-*")) and len([p for p in root.iterdir() if p.is_dir()]) == 1


def test_num_proc_does_not_change_the_prepared_data(tmp_path):
    from lightning_order import OrderedDataModule

    one = OrderedDataModule(cache_dir=str(tmp_path / "a"), demo_size=1500, vocab_size=300, max_length=16)
    two = OrderedDataModule(
        cache_dir=str(tmp_path / "b"), demo_size=1500, vocab_size=300, max_length=16, num_proc=2
    )
    assert one.cache_key == two.cache_key
    two.prepare_data()
    assert one.data_fingerprints() == two.data_fingerprints()
