"""The seam statistic of checks/block_seams.py on correct and planted train streams (docs/lm.md's table).

Run: ``PYTHONPATH=$PWD python benchmarks/bench_block_seams.py [--results]`` (about 20 s on 2 cores;
``--results`` writes ``benchmarks/results/block_seams.json``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests")]

from figures import command_line, write_results  # noqa: E402
from nanogpt import encode, prepare, train_tokenizer  # noqa: E402
from run_clm import prepared_text  # noqa: E402

from lightning_order.checks.block_seams import seam_z  # noqa: E402

BLOCK = 32


def row(name: str, tokens: np.ndarray) -> dict[str, float | int | bool]:
    """One markdown row, printed: tokens, whole periods, z at block + 1 and at block; returned as figures."""
    whole = tokens.size % (BLOCK + 1) == 0
    z_period, z_block = seam_z(tokens, BLOCK + 1), seam_z(tokens, BLOCK)
    print(f"| {name} | {tokens.size} | {whole} | {z_period:.1f} | {z_block:.1f} |")
    return {"tokens": int(tokens.size), "whole_periods": bool(whole), "z_period": float(z_period), "z_block": float(z_block)}


def main() -> None:
    """run_clm's text correct and split after packing at four seeds, then tests/nanogpt.py's correct variants."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/block_seams.json, the figures the docs quote"
    )
    args = parser.parse_args()
    figures: dict[str, dict[str, float | int | bool]] = {}
    for seed in range(4):
        train, val, bpe_texts = prepared_text(seed=seed)
        tokenizer = train_tokenizer(bpe_texts)
        figures[f"run_clm.correct.{seed}"] = row(f"run_clm text, correct (seed {seed})", encode(tokenizer, train))
        ids = encode(tokenizer, train + val)
        blocks = ids[: len(ids) // (BLOCK + 1) * (BLOCK + 1)].reshape(-1, BLOCK + 1)
        order = np.random.default_rng(seed).permutation(len(blocks))
        split = blocks[order[: round(0.8 * len(blocks))]].ravel()
        figures[f"run_clm.split.{seed}"] = row(f"run_clm text, blocks split (seed {seed})", split)
    variants = {
        "correct": {},
        "footers 0.5": {"footers": 0.5},
        "360 docs": {"documents": 360},
        "seed 1": {"seed": 1},
    }
    with tempfile.TemporaryDirectory() as folder:
        for name, options in variants.items():
            where = Path(folder) / name.replace(" ", "_")
            prepare(where, **options)
            tokens = np.memmap(where / "train.bin", dtype=np.uint16, mode="r")
            figures[f"nanogpt.{name.replace(' ', '_').replace('.', '')}"] = row(f"nanogpt {name}", tokens)
    if args.results:
        print(f"wrote {write_results('block_seams', figures, command_line())}")


if __name__ == "__main__":
    main()
