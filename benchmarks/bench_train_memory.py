"""Per-rank memory of the LM train loader as the train split grows: it should stay flat.

For each ``--blocks`` count, a fresh Python process writes a split of tiny blocks (``--width``
int32 tokens each) as ``--shards`` block shards with their index (what ``pack`` writes,
:mod:`lightning_order.data.lm.block_shards`; written by this process), then a child process does
what one training rank does with it:
opens the shards through the index (``ShardedBlocks``), builds the ``BlockDataset``, the global
order of rank ``--rank`` of ``--world`` ranks and the resumable train loader
(``make_train_loader``), reads ``--batches`` batches, asks the loader's ``state_dict()`` (the
position and the order's digest, what a checkpoint stores), and resumes a second loader from that
state and reads one more batch. Reported per count: the process's peak RSS after the imports
(the baseline) and at the end, and their difference; and the anonymous memory (``RssAnon``: the
process's own, without the file pages its memory maps hold) held mid-epoch less that after the
imports: what the loader keeps. Peak RSS also counts the shard pages the batches touched (the
data read, and the kernel's fault-around pages beside them: up to the whole file at 80 MB),
which is why the blocks are tiny and why the anonymous figure is the loader's. ``--legacy`` also runs the order of earlier versions in the same process kind for
contrast: a materialised permutation of the split per epoch and the rank's list of indices.
``--mixture`` reads the split as a weighted mixture instead (``MixedOrder``,
:mod:`lightning_order.data.lm.mixture`): the blocks cut into sources of ``--mixture`` relative
sizes, drawn at equal weights (so the small sources are upsampled and the large ones downsampled).
``--legacy`` measures the single-source order of earlier versions only: a mixture's earlier
figures come from running this option on the code of that version.

Example:
    python benchmarks/bench_train_memory.py --blocks 100000 10000000 --json bench_train_memory.json
    python benchmarks/bench_train_memory.py --blocks 100000 10000000 --mixture 0.2 0.3 0.5

``--results`` writes ``benchmarks/results/train_memory.json`` (``train_memory_mixture.json`` with
``--mixture``): each row under ``<order>.<blocks>``, the order ``global``, ``legacy`` or ``mixture``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from figures import command_line, write_results

from lightning_order.data.lm.block_shards import write_index, write_shard

_CHILD = r"""
import json, resource, sys
from pathlib import Path
import numpy as np
import torch
from lightning_order.data.engine.loaders import make_train_loader
from lightning_order.data.lm.block_shards import ShardedBlocks
from lightning_order.data.lm.datamodule import BlockDataset, collate_blocks
from lightning_order.data.lm.mixture import MixedOrder, mixture_counts
from lightning_order.positions import GlobalOrder

args = json.loads(sys.argv[1])
folder = Path(args["folder"])
n = args["blocks"]

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

def anon_mb():
    # the process's own (anonymous) memory: RSS less the file pages the memory maps hold
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")

if args["legacy"]:
    # the order of earlier versions: the epoch's permutation of the split, then the rank's list
    baseline, anon = peak_mb(), anon_mb()
    order = np.random.Generator(np.random.PCG64([0, 0])).permutation(n)
    rank_list = order[args["rank"] :: args["world"]].tolist()
    print(json.dumps({"baseline_mb": baseline, "peak_mb": peak_mb(), "anon_base_mb": anon, "anon_mb": anon_mb()}))
    sys.exit(0)

baseline, anon = peak_mb(), anon_mb()
blocks = ShardedBlocks.open(folder)
dataset = BlockDataset(blocks)
order = GlobalOrder(len(blocks), args["batch_size"], args["world"], args["rank"], seed=0)
if args["mixture"]:
    # sources of the given relative sizes, drawn at equal weights
    sizes = [int(n * f / sum(args["mixture"])) for f in args["mixture"]]
    sizes[-1] += n - sum(sizes)
    counts = mixture_counts(sizes, [1.0] * len(sizes))
    order = MixedOrder(n, args["batch_size"], args["world"], args["rank"], seed=0, blocks=tuple(sizes),
                       counts=tuple(counts))
loader = make_train_loader(dataset, order, 0, collate_blocks)
batches = iter(loader)
tokens = 0
for _ in range(args["batches"]):
    tokens += int(next(batches)["input_ids"].sum())
state = loader.state_dict()
resumed = make_train_loader(BlockDataset(ShardedBlocks.open(folder)), order, 0, collate_blocks)
resumed.load_state_dict(state)
after = next(iter(resumed))["input_ids"]
held = anon_mb()  # both loaders mid-epoch, their iterators alive
print(json.dumps({"baseline_mb": baseline, "peak_mb": peak_mb(), "anon_base_mb": anon, "anon_mb": held,
                  "samples": state["samples"], "checksum": tokens}))
"""


def _write_split(folder: Path, blocks: int, width: int, shards: int) -> None:
    """Writes ``blocks`` tiny blocks as ``shards`` shards and their index (in this process, a shard at a time)."""
    per = -(-blocks // shards)
    index = []
    for s in range(shards):
        first, rows = s * per, min(per, blocks - s * per)
        if rows <= 0:
            break
        block = (np.arange(first, first + rows, dtype=np.int64)[:, None] % 50_000 + np.arange(width)).astype(
            np.int32
        )
        write_shard(folder / f"part-{s:05d}.npy", block)
        index.append((f"part-{s:05d}.npy", rows))
    write_index(folder, index)


def _run(blocks: int, ns: argparse.Namespace, legacy: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="train-memory-") as folder:
        if not legacy:
            _write_split(Path(folder), blocks, ns.width, ns.shards)
        args = {
            "folder": folder,
            "blocks": blocks,
            "batch_size": ns.batch_size,
            "world": ns.world,
            "rank": ns.rank,
            "batches": ns.batches,
            "legacy": legacy,
            "mixture": ns.mixture,
        }
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(args)], capture_output=True, text=True, check=True
        )
        found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    found["loader_mb"] = found["peak_mb"] - found["baseline_mb"]
    found["loader_anon_mb"] = found["anon_mb"] - found["anon_base_mb"]
    kind = "earlier (materialised)" if legacy else ("mixture" if ns.mixture else "bijection")
    return {"blocks": blocks, "order": kind, **found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, nargs="+", default=[100_000, 10_000_000])
    parser.add_argument("--width", type=int, default=2, help="tokens a block (block_size + 1)")
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--rank", type=int, default=3)
    parser.add_argument(
        "--batches", type=int, default=1000, help="batches read (at most an epoch of the smallest split)"
    )
    parser.add_argument("--legacy", action="store_true", help="also measure the order of earlier versions")
    parser.add_argument(
        "--mixture",
        type=float,
        nargs="+",
        help="read the split as a mixture of sources of these relative sizes at equal weights",
    )
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/train_memory*.json, the figures the docs quote"
    )
    ns = parser.parse_args()
    rows = [_run(b, ns, legacy=False) for b in ns.blocks]
    keyed = {f"{'mixture' if ns.mixture else 'global'}.{b}": row for b, row in zip(ns.blocks, rows)}
    if ns.legacy:
        legacy = [_run(b, ns, legacy=True) for b in ns.blocks]
        keyed.update({f"legacy.{b}": row for b, row in zip(ns.blocks, legacy)})
        rows += legacy
    for row in rows:
        print(
            f"{row['order']:>24}  {row['blocks']:>12,} blocks: peak RSS {row['peak_mb']:7.1f} MB, "
            f"after imports {row['baseline_mb']:7.1f} MB, loader {row['loader_mb']:6.1f} MB (peak RSS), "
            f"{row['loader_anon_mb']:6.1f} MB (anonymous memory held mid-epoch)"
        )
    if ns.json:
        with open(ns.json, "w") as handle:
            json.dump(rows, handle, indent=2)
    if ns.results:
        name = "train_memory_mixture" if ns.mixture else "train_memory"
        print(f"wrote {write_results(name, keyed, command_line())}")


if __name__ == "__main__":
    main()
