"""The seam statistic of checks/block_seams.py on correct and planted train streams (docs/lm.md's table).

Run: ``PYTHONPATH=$PWD python benchmarks/bench_block_seams.py`` (about 20 s on 2 cores).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests")]

from nanogpt import encode, prepare, train_tokenizer  # noqa: E402
from run_clm import prepared_text  # noqa: E402

from lightning_order.checks.block_seams import seam_z  # noqa: E402

BLOCK = 32


def row(name: str, tokens: np.ndarray) -> None:
    """One markdown row: tokens, whole periods, z at block + 1 and at block."""
    whole = tokens.size % (BLOCK + 1) == 0
    print(
        f"| {name} | {tokens.size} | {whole} | {seam_z(tokens, BLOCK + 1):.1f} | {seam_z(tokens, BLOCK):.1f} |"
    )


def main() -> None:
    """run_clm's text correct and split after packing at four seeds, then tests/nanogpt.py's correct variants."""
    for seed in range(4):
        train, val, bpe_texts = prepared_text(seed=seed)
        tokenizer = train_tokenizer(bpe_texts)
        row(f"run_clm text, correct (seed {seed})", encode(tokenizer, train))
        ids = encode(tokenizer, train + val)
        blocks = ids[: len(ids) // (BLOCK + 1) * (BLOCK + 1)].reshape(-1, BLOCK + 1)
        order = np.random.default_rng(seed).permutation(len(blocks))
        row(f"run_clm text, blocks split (seed {seed})", blocks[order[: round(0.8 * len(blocks))]].ravel())
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
            row(f"nanogpt {name}", np.memmap(where / "train.bin", dtype=np.uint16, mode="r"))


if __name__ == "__main__":
    main()
