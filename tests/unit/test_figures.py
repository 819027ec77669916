"""Every figure the docs quote equals the one its benchmark generated (benchmarks/figures.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import load_benchmark

figures = load_benchmark("figures")


def test_every_quoted_figure_equals_its_generated_value() -> None:
    found = figures.check()
    assert len(found) >= 10, "the README and docs/lm.md quote the main jobs' figures through markers"
    stale = [str(q) for q in found if q.stale]
    assert not stale, "stale figures (re-run the benchmark, then python benchmarks/figures.py --write):\n" + "\n".join(stale)


def test_every_results_file_says_how_it_was_made() -> None:
    paths = sorted(figures.RESULTS.glob("*.json"))
    assert paths
    for path in paths:
        result = json.loads(path.read_text())
        assert {"command", "machine", "date", "figures"} <= set(result), path.name
        assert result["command"].startswith("python benchmarks/"), path.name


def _tree(tmp_path: Path, quoted: str) -> tuple[Path, Path]:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(f"perplexity {quoted} after 716 steps\n")
    (tmp_path / "docs" / "page.md").write_text("blocks: <!--fig lm_demo.train_blocks:,d-->2 876<!--/fig-->\n")
    results = tmp_path / "results"
    results.mkdir()
    (results / "lm_demo.json").write_text(
        json.dumps({"command": "c", "machine": "m", "date": "d", "figures": {"val_ppl": 82.8412, "train_blocks": 2876}})
    )
    return tmp_path, results


def test_a_quote_that_differs_from_its_source_is_stale_and_rewritten(tmp_path: Path) -> None:
    root, results = _tree(tmp_path, "<!--fig lm_demo.val_ppl:.2f-->83.74<!--/fig-->")
    found = figures.check(root, results)
    assert [(q.name, q.text, q.expected, q.stale) for q in found] == [
        ("lm_demo.val_ppl", "83.74", "82.84", True),
        ("lm_demo.train_blocks", "2 876", "2 876", False),  # a comma of the format is the docs' space
    ]
    assert "README.md:1" in str(found[0]) and "83.74" in str(found[0])

    figures.write(root, results)
    assert (root / "README.md").read_text() == "perplexity <!--fig lm_demo.val_ppl:.2f-->82.84<!--/fig--> after 716 steps\n"
    assert not [q for q in figures.check(root, results) if q.stale]


@pytest.mark.parametrize("name", ["lm_demo.nothing", "elsewhere.val_ppl"])
def test_a_quote_of_no_generated_figure_is_reported(tmp_path: Path, name: str) -> None:
    root, results = _tree(tmp_path, f"<!--fig {name}-->1<!--/fig-->")
    quote = figures.check(root, results)[0]
    assert quote.stale and quote.expected is None and "in no file of benchmarks/results/" in str(quote)


def test_a_labs_own_results_file_is_a_source_by_path(tmp_path: Path) -> None:
    root, results = _tree(tmp_path, "<!--fig lab.runs.#-->2<!--/fig--> runs, <!--fig lab.cases.a.share.0:.1%-->12.0 %<!--/fig-->")
    lab = tmp_path / "lab.json"
    lab.write_text(json.dumps({"runs": [1, 2, 3], "cases": {"a": {"share": [0.125, 0.01]}}}))
    found = figures.check(root, results, {"lab": lab})
    assert [(q.name, q.expected, q.stale) for q in found[:2]] == [
        ("lab.runs.#", "3", True),  # a list's length
        ("lab.cases.a.share.0", "12.5 %", True),  # keys and indices; a percent as the docs write it
    ]
    assert figures.check(root, results, {})[0].expected is None  # no such lab: named as missing


def test_a_benchmarks_nested_results_are_written_flat_and_quoted_by_path(tmp_path: Path) -> None:
    nested = {"checks": {"1000000": {"total_ms": 27.6}}, "interval": (0.25, 0.75), "rows": [{"share": 0.5}]}
    path = figures.write_results("bench", nested, "python benchmarks/bench.py --results", folder=tmp_path)
    written = json.loads(path.read_text())
    assert written["figures"] == {"checks.1000000.total_ms": 27.6, "interval.0": 0.25, "interval.1": 0.75, "rows.0.share": 0.5}
    assert {"command", "machine", "date"} <= set(written)
    loaded = figures.load_results(tmp_path, {})
    assert figures.render(loaded["bench.checks.1000000.total_ms"], ".1f") == "27.6"
    assert figures.render(loaded["bench.rows.0.share"], ".0%") == "50 %"


def test_the_command_recorded_is_the_one_a_user_types() -> None:
    assert figures.command_line(["/repo/benchmarks/bench_verify.py", "--mb", "300", "--results"]) == (
        "python benchmarks/bench_verify.py --mb 300 --results"
    )
    assert figures.command_line(["bench_x.py", "a b"]) == "python benchmarks/bench_x.py 'a b'"


derived = load_benchmark("derived")


def test_every_derived_results_file_equals_what_its_inputs_give() -> None:
    assert not derived.stale(), "re-derive: python benchmarks/figures.py --write"


@pytest.mark.parametrize(
    ("text_bytes", "partitions"),
    [(40e6, 4), (1e12, 16_384), (1e13, 131_072)],  # past the default's cap: near 64 MB each
)
def test_the_worked_partitions_are_the_default_until_a_partition_grows_too_large(text_bytes: float, partitions: int) -> None:
    assert derived.partitions_for(text_bytes) == partitions


def test_a_derived_file_takes_its_inputs_machine_and_date_and_moves_with_them(tmp_path: Path) -> None:
    src = figures.RESULTS
    for name in ("lm_serial", "lm_driver"):
        (tmp_path / f"{name}.json").write_text((src / f"{name}.json").read_text())
    first = derived.derive("scale", tmp_path)
    serial = json.loads((src / "lm_serial.json").read_text())
    assert first["machine"] == serial["machine"] and first["date"] >= serial["date"]
    assert first["command"].startswith("python benchmarks/derived.py")
    derived.write(tmp_path)
    assert not derived.stale(tmp_path)

    serial["figures"]["200.serial.train_tokenizer"] += 60.0  # a slower tokenizer: more serial time
    (tmp_path / "lm_serial.json").write_text(json.dumps(serial))
    assert derived.stale(tmp_path) == ["scale.json differs from lm_serial, lm_driver (python benchmarks/derived.py)"]
    again = derived.derive("scale", tmp_path)["figures"]
    assert again["unit.tokenizer_s"] == first["figures"]["unit.tokenizer_s"] + 60.0
    assert again["1tb.serial_min"] > first["figures"]["1tb.serial_min"]
