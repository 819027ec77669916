"""OrderedCausalLM sharded under ModelParallelStrategy on 2 CPU ranks (gloo): FSDP2 and tensor parallelism (issue #36).

All cases in one launch of tests/distributed/ddp_scripts/sharded_ddp.py: the correct runs are
silent, the model checks read a DTensor's global shape (never a rank's shard), each planted error
is caught under both meshes before step 1, and a distributed checkpoint (a folder) resumes exactly
and refuses other data.
"""

from __future__ import annotations

import pytest
from ddp_utils import read_json, run_script

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def launch(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("sharded_ddp")
    run_script("sharded_ddp.py", out, str(out / "cache"), timeout=500)
    return [read_json(out / f"rank{r}.json") for r in range(2)]


def _case(launch: list[dict], case: str) -> list[dict]:
    for rank, result in enumerate(launch):
        assert case in result, f"rank {rank} did not reach case {case!r}: {sorted(result)}"
    return [result[case] for result in launch]


def _silent(ranks: list[dict], steps: int = 3) -> None:
    for result in ranks:
        assert "error" not in result and result["violations"] == [], result
        assert result["global_step"] == steps


def test_fsdp2_shards_the_embedding_and_the_correct_run_is_silent(launch) -> None:
    ranks = _case(launch, "fsdp2")
    _silent(ranks)
    for result in ranks:
        assert result["embedding"]["type"] == "DTensor"
        rows = result["embedding"]["global"][0]
        assert result["embedding"]["local"][0] == rows // 2  # each rank holds half: the check read the whole
    assert ranks[0]["batch_hashes"] != ranks[1]["batch_hashes"]  # two data-parallel ranks, two shares


def test_tensor_parallel_splits_the_mlp_and_the_correct_run_is_silent(launch) -> None:
    ranks = _case(launch, "tp")
    _silent(ranks)
    for result in ranks:
        assert result["mlp"]["type"] == "DTensor"
        assert result["mlp"]["local"][0] * 2 == result["mlp"]["global"][0]
    assert ranks[0]["batch_hashes"] == ranks[1]["batch_hashes"]  # one tensor-parallel group, one share


def test_a_vocab_parallel_embedding_is_read_by_its_global_rows(launch) -> None:
    ranks = _case(launch, "tp-vocab-parallel")
    _silent(ranks)
    for result in ranks:
        assert result["embedding"]["local"][0] * 2 == result["embedding"]["global"][0]


@pytest.mark.parametrize("mesh", ["fsdp2", "tp"])
@pytest.mark.parametrize(
    ("planted", "rule", "says"),
    [
        ("token-added", "vocab-changed-after-init", "(size 300 -> 301)"),
        ("block-size", "init-before-data", "hparams.block_size is 16, the data's block_size is 32"),
        ("short-table", "vocab-changed-after-init", "embedding rows 256"),
    ],
)
def test_each_planted_model_error_is_caught_before_step_1_under_both_meshes(
    launch, mesh: str, planted: str, rule: str, says: str
) -> None:
    for result in _case(launch, f"{mesh}-{planted}"):
        assert result["error"] == "OrderError", result
        assert rule in result["rules"] and result["global_step"] == 0 and result["batch_hashes"] == []
        assert says in result["message"]


def test_a_distributed_checkpoint_resumes_exactly_where_the_run_stopped(launch) -> None:
    saved = launch[0]["fsdp2-saved"]
    assert saved["is_dir"] and "meta.pt" in saved["files"]  # Lightning's distributed checkpoint: a folder
    straight, resumed = _case(launch, "fsdp2-straight"), _case(launch, "fsdp2-resume")
    _silent(straight, 4)
    _silent(resumed, 4)
    for whole, rest in zip(straight, resumed):
        assert len(rest["batch_hashes"]) == 2
        assert rest["batch_hashes"] == whole["batch_hashes"][2:]


def test_a_distributed_checkpoint_resumed_on_other_data_is_refused(launch) -> None:
    for result in _case(launch, "fsdp2-resume-changed"):
        assert result["error"] == "OrderError", result
        assert result["rules"] == ["resume-data-changed"]
        assert result["batch_hashes"] == []


def test_four_ranks_dp2_by_tp2_read_by_group_and_catch_a_planted_error(tmp_path) -> None:
    """FSDP2 and tensor parallelism together: ranks (0, 1) and (2, 3) are the tensor-parallel groups."""
    run_script("sharded_ddp.py", tmp_path, str(tmp_path / "cache"), "4", timeout=500, ranks=4)
    results = [read_json(tmp_path / f"rank{r}.json") for r in range(4)]
    correct = [r["2d"] for r in results]
    _silent(correct)
    hashes = [r["batch_hashes"] for r in correct]
    assert hashes[0] == hashes[1] and hashes[2] == hashes[3] and hashes[0] != hashes[2]
    assert all(r["embedding"]["type"] == r["mlp"]["type"] == "DTensor" for r in correct)
    for result in (r["2d-block-size"] for r in results):
        assert result["rules"] == ["init-before-data"] and result["global_step"] == 0


def test_a_distributed_checkpoints_meta_pt_records_the_shards_written_with_it(launch) -> None:
    assert launch[0]["fsdp2-saved"]["tied"]


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("mixed-meta", "was not written with the shards beside it"),  # A's weights under C's data: silent before
        ("mixed-vocab", "was not written with the shards beside it"),  # torch's size mismatch on every rank before
        ("mixed-vocab-untied", "cannot be restored into this model (ValueError: Size mismatch"),  # untied
        ("truncated-meta", "is not a readable checkpoint"),
        ("foreign-meta", "is no Lightning checkpoint's meta.pt"),
    ],
)
def test_a_folder_mixing_two_checkpoints_or_a_damaged_meta_pt_is_one_checkpoint_error(
    launch, case: str, says: str
) -> None:
    """Issue #42: one CheckpointError line on every rank, before any step, never a raw traceback."""
    for result in _case(launch, case):
        assert result["error"] == "CheckpointError", result
        assert says in result["message"] and "\n" not in result["message"], result["message"]
        assert result["global_step"] == 0 and result["batch_hashes"] == []
