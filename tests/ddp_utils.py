"""Running real DDP (CPU, gloo, ``strategy="ddp"``) from pytest.

Lightning's ``ddp`` strategy re-launches the current command once per extra rank, so a test must
not start it inside the pytest process (that would re-run pytest). Each DDP test therefore runs a
small script from ``tests/distributed/ddp_scripts/`` in a subprocess; the script writes what it observed as
JSON (rank 0 writes ``result.json``; scripts may also write one file per rank) into an output
folder given as its first argument, and the test asserts on that.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from lightning_order.distributed import launch_env

SCRIPTS = Path(__file__).resolve().parent / "distributed" / "ddp_scripts"


def run_script(
    name: str, out_dir: Path, *args: str, timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess:
    """Runs ``tests/distributed/ddp_scripts/<name>`` with ``out_dir`` as first argument, in its own process."""
    out_dir.mkdir(parents=True, exist_ok=True)
    # Lightning's ddp launcher re-runs sys.argv for the other ranks; a clean environment keeps
    # the children's set-up identical to rank 0's.
    env = launch_env()
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / name), str(out_dir), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=str(out_dir),
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{name} exited {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
        )
    return proc


def read_json(path: Path) -> Any:
    """Reads a JSON file a script wrote."""
    return json.loads(Path(path).read_text())
