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
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from lightning_order.distributed import launch_env

SCRIPTS = Path(__file__).resolve().parent / "distributed" / "ddp_scripts"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank_env(rank: int, ranks: int, port: str) -> dict[str, str]:
    """The variables that make a process one rank of ``ranks`` (none for a single process)."""
    if ranks == 1:
        return {}
    return {
        "LOCAL_RANK": str(rank),
        "NODE_RANK": "0",
        "WORLD_SIZE": str(ranks),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": port,
    }


def run_script(
    name: str, out_dir: Path, *args: str, timeout: float = 300, check: bool = True, ranks: int = 2
) -> subprocess.CompletedProcess:
    """Runs ``tests/distributed/ddp_scripts/<name>`` with ``out_dir`` as first argument, one process per rank.

    Both ranks start at once, as ``torchrun`` starts them (``LOCAL_RANK``, ``NODE_RANK``, one
    ``MASTER_PORT``): Lightning's environment then sees processes created externally and does not
    re-launch the script, so the two ranks import torch and Lightning side by side instead of one
    after the other. ``ranks=1`` runs a script that is no DDP job (no rank variables). Rank 0's
    output is returned; any rank's failure fails the run.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPTS / name), str(out_dir), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # A clean environment keeps every rank's set-up identical.
            env=launch_env(**_rank_env(rank, ranks, port)),
            cwd=str(out_dir),
        )
        for rank in range(ranks)
    ]
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            outputs.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for rank, (code, out, err) in enumerate(outputs):
        if check and code != 0:
            raise AssertionError(
                f"{name} rank {rank} exited {code}\n--- stdout ---\n{out[-4000:]}\n--- stderr ---\n{err[-6000:]}"
            )
    code, out, err = outputs[0]
    return subprocess.CompletedProcess(procs[0].args, code, out, err)


def read_json(path: Path) -> Any:
    """Reads a JSON file a script wrote."""
    return json.loads(Path(path).read_text())
