"""benchmarks/bench_resume.py runs end to end on a few batches and states what it measured: both
loaders over the same batches, each clock's overhead with an interval, a checkpoint's cost."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import load_benchmark

bench = load_benchmark("bench_resume")


def test_both_loaders_read_the_same_number_of_batches_and_the_figures_are_stated(tmp_path: Path) -> None:
    tiny = ["--blocks", "640", "--block-size", "8", "--batch-size", "16", "--epochs", "2", "--repeats", "3"]
    result = bench.main([*tiny, "--json", str(tmp_path / "out.json")])
    assert result["batches_per_run"] == 2 * 40  # 40 batches an epoch, each loader timed on every one
    for clock in ("wall_us", "cpu_us"):
        figures = result[clock]
        low, high = figures["percent_interval"]
        assert low <= figures["percent_of_2ms_step"] <= high
        assert figures["before"] > 0 and figures["resumable"] > 0
    assert result["state_dict_us"] > 0
    assert json.loads((tmp_path / "out.json").read_text()) == result


def test_the_two_loaders_serve_the_same_blocks_in_an_epoch() -> None:
    import numpy as np

    blocks = np.arange(64 * 5, dtype=np.int32).reshape(64, 5)
    loaders = bench._loaders(blocks, 8, 0)
    rows = {
        side: sorted(r[0] for b in loader for r in b["input_ids"].tolist())
        for side, loader in loaders.items()
    }
    assert rows["before"] == rows["resumable"] == sorted(blocks[:, 0].tolist())
