"""DDP (2 CPU ranks, gloo), one launch: every SymptomMonitor case the DDP tests assert on.

Usage: ``python monitor_ddp.py OUT_DIR``. Run by tests/distributed/test_symptom_monitor_ddp.py.
The cases run one after another in the same process group (Lightning launches the second rank at
the first ``fit``; later Trainers reuse it), each in its own folder ``OUT_DIR/<case>``, the one
that pauses last:

- ``shuffled``: monitor_ranks.py's correct run (rows shuffled before sharding, global statistics);
- ``handwritten``: monitor_handwritten.py's capped word-level vocabulary, with an OrderValidator;
- ``per-shard``: monitor_ranks.py's per-rank statistics; the monitor pauses every rank alike.

Each rank writes ``rank<r>.json`` (a key per case, what that script's ``run`` returns) after
every case.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import monitor_handwritten
import monitor_ranks

from lightning_order.distributed import release_process_group

CASES = ("shuffled", "handwritten", "per-shard")


def main(out: Path) -> None:
    results: dict = {}
    for case in CASES:
        folder = out / case
        folder.mkdir(parents=True, exist_ok=True)
        if case == "handwritten":
            results[case] = monitor_handwritten.run(folder)
        else:
            results[case] = monitor_ranks.run(folder, case)
        (out / f"rank{results[case]['rank']}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)
