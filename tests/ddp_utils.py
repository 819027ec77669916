"""Running real DDP (CPU, gloo, ``strategy="ddp"``) from pytest.

Lightning's ``ddp`` strategy re-launches the current command once per extra rank, so a test must
not start it inside the pytest process (that would re-run pytest). Each DDP test therefore runs a
small script from ``tests/distributed/ddp_scripts/``, one process per rank started side by side
(as ``torchrun`` does, so Lightning launches nothing itself); the script writes what it observed as
JSON (rank 0 writes ``result.json``; scripts may also write one file per rank) into an output
folder given as its first argument, and the test asserts on that.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from lightning_order.distributed import run_ranks

SCRIPTS = Path(__file__).resolve().parent / "distributed" / "ddp_scripts"


def run_script(
    name: str, out_dir: Path, *args: str, timeout: float = 300, check: bool = True, ranks: int = 2
) -> subprocess.CompletedProcess:
    """Runs ``tests/distributed/ddp_scripts/<name>`` with ``out_dir`` as first argument, one process per rank.

    Both ranks start at once, as ``torchrun`` starts them
    (:func:`lightning_order.distributed.run_ranks`): Lightning re-launches nothing, so the two
    ranks import torch and Lightning side by side. ``ranks=1`` runs a script that is no DDP job.
    Rank 0's result is returned; any rank's failure fails the run.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(SCRIPTS / name), str(out_dir), *args]
    finished = run_ranks(command, ranks, cwd=str(out_dir), timeout=timeout)
    for rank, proc in enumerate(finished):
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{name} rank {rank} exited {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}\n"
                f"--- stderr ---\n{proc.stderr[-6000:]}"
            )
    return finished[0]


def read_json(path: Path) -> Any:
    """Reads a JSON file a script wrote."""
    return json.loads(Path(path).read_text())
