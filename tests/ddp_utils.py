"""Running real DDP (CPU, gloo, ``strategy="ddp"``) from pytest.

Lightning's ``ddp`` strategy re-launches the current command once per extra rank, so a test must
not start it inside the pytest process (that would re-run pytest). Each DDP test therefore runs a
small script from ``tests/distributed/ddp_scripts/``, one process per rank started side by side
(as ``torchrun`` does, so Lightning launches nothing itself); the script writes what it observed as
JSON (rank 0 writes ``result.json``; scripts may also write one file per rank) into an output
folder given as its first argument, and the test asserts on that.

The rank processes are forked from one server process that imported torch, Lightning, ``datasets``
and ``lightning_order`` once (:mod:`multiprocessing`'s ``forkserver`` with those modules
preloaded): a fresh interpreter's imports are most of a small DDP job, and every launch would pay
them twice. Each rank is still a new process, with no state from pytest or an earlier launch, the
environment a subprocess would get (:func:`launching.launch_env` plus the rank
variables of :func:`launching.rank_variables`), its own working folder and its
output captured to files.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

from launching import launch_env, rank_variables

#: What the rank processes' server imports once (what every DDP script imports).
PRELOAD = ["torch", "pytorch_lightning", "lightning.pytorch", "datasets", "lightning_order"]
_SERVER: list[Any] = []

SCRIPTS = Path(__file__).resolve().parent / "distributed" / "ddp_scripts"


def run_script(
    name: str, out_dir: Path, *args: str, timeout: float = 300, check: bool = True, ranks: int = 2
) -> subprocess.CompletedProcess:
    """Runs ``tests/distributed/ddp_scripts/<name>`` with ``out_dir`` as first argument, one process per rank.

    Both ranks start at once, as ``torchrun`` starts them (:func:`run_ranks_forked`): Lightning
    re-launches nothing. ``ranks=1`` runs a script that is no DDP job.
    Rank 0's result is returned; any rank's failure fails the run.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    finished = run_ranks_forked(SCRIPTS / name, [str(out_dir), *args], ranks, cwd=out_dir, timeout=timeout)
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


def _context() -> multiprocessing.context.BaseContext:
    """The forkserver context whose server preloads :data:`PRELOAD` (started on first use)."""
    if not _SERVER:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _SERVER.append(context)
    return _SERVER[0]


def _rank_main(script: str, argv: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> None:
    """One rank: the environment, folder and output files a subprocess would have, then the script as ``__main__``."""
    os.environ.clear()
    os.environ.update(env)
    # A forkserver's child inherits it as its default way to start processes; a fresh interpreter
    # has the platform's default (its DataLoader workers, its engines).
    multiprocessing.set_start_method(multiprocessing.get_all_start_methods()[0], force=True)
    os.chdir(cwd)
    for fd, path in ((1, out), (2, err)):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(handle, fd)
        os.close(handle)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    sys.argv = [script, *argv]
    sys.path.insert(0, str(Path(script).parent))  # as ``python script.py`` puts it first
    runpy.run_path(script, run_name="__main__")


def run_ranks_forked(
    script: Path, argv: list[str], ranks: int, *, cwd: Path, timeout: float
) -> list[subprocess.CompletedProcess]:
    """``python script *argv`` once per rank, all at once, forked from the preloaded server.

    The ranks get what :func:`launching.run_ranks` gives its subprocesses
    (:func:`launching.rank_variables`). On expiry every rank is killed and it raises.
    """
    jobs = [
        _start(script, argv, cwd, variables, f"rank{rank}")
        for rank, variables in enumerate(rank_variables(ranks))
    ]
    return _finish(jobs, timeout)


def run_ranks_preloaded(
    command: list[str], ranks: int = 2, *, cwd: str, timeout: float, **extra: str
) -> list[subprocess.CompletedProcess]:
    """:func:`launching.run_ranks` for ``[python, script, *argv]``, each rank forked from the preloaded server.

    The benchmarks that start their own ranks (``benchmarks/order_lab.py``, ``benchmarks/lm_lab.py``)
    call ``run_ranks``; their tests put this in its place, so a launch does not pay the two fresh
    interpreters' imports. Each rank is still a new process with the same environment and argv.
    """
    _, script, *argv = command
    jobs = [
        _start(Path(script), argv, Path(cwd), {**extra, **variables}, f"rank{rank}")
        for rank, variables in enumerate(rank_variables(ranks))
    ]
    return _finish(jobs, timeout)


def run_side_by_side(
    name: str, runs: list[tuple[Path, list[str]]], timeout: float = 300
) -> list[subprocess.CompletedProcess]:
    """Independent processes of ``tests/distributed/ddp_scripts/<name>``, all at once: one per
    ``(out_dir, args)``, each run as ``python <name> out_dir *args`` in ``out_dir`` (no DDP job)."""
    jobs = []
    for out_dir, args in runs:
        out_dir.mkdir(parents=True, exist_ok=True)
        jobs.append(_start(SCRIPTS / name, [str(out_dir), *args], out_dir, {}, "run"))
    return _finish(jobs, timeout)


def _start(script: Path, argv: list[str], cwd: Path, variables: dict[str, str], tag: str) -> tuple:
    out, err = cwd / f".{tag}.stdout", cwd / f".{tag}.stderr"
    proc = _context().Process(
        target=_rank_main, args=(str(script), argv, launch_env(**variables), str(cwd), str(out), str(err))
    )
    proc.start()
    return proc, [sys.executable, str(script), *argv], out, err


def _finish(jobs: list[tuple], timeout: float) -> list[subprocess.CompletedProcess]:
    """Waits for every job (killing them all on expiry, then raising); their exit codes and output."""
    try:
        for proc, command, _, _ in jobs:
            proc.join(timeout)
            if proc.exitcode is None:
                raise subprocess.TimeoutExpired(command, timeout)
    finally:
        for proc, *_ in jobs:
            if proc.exitcode is None:
                proc.kill()
                proc.join()
    return [
        subprocess.CompletedProcess(
            command, proc.exitcode, out.read_text(errors="replace"), err.read_text(errors="replace")
        )
        for proc, command, out, err in jobs
    ]
