"""Starting a fresh DDP job's ranks on this machine, as ``torchrun`` starts them (tests and benchmarks).

:func:`launch_env` is this process's environment without the rank variables Lightning's launcher
sets (so a child is rank 0 of its own job), :func:`rank_variables` what ``torchrun`` gives each
rank, and :func:`run_ranks` one subprocess per rank, all at once. The benchmarks import it with
``tests/`` on their path; the package itself never starts a job.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Sequence

__all__ = ["RANK_VARIABLES", "launch_env", "rank_variables", "run_ranks"]

#: What Lightning's launcher sets for the ranks it starts; a fresh job must not inherit them.
RANK_VARIABLES = ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GLOBAL_RANK")


def launch_env(**extra: str) -> dict[str, str]:
    """This process's environment for starting a new DDP job in a subprocess.

    The rank variables are dropped (so the child is rank 0 of its own job and Lightning's launcher
    starts its other ranks alike), output is unbuffered, and fork-based launching is off.

    Args:
        **extra: variables to set on top.
    """
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
    env.setdefault("PL_DISABLE_FORK", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def rank_variables(ranks: int) -> list[dict[str, str]]:
    """The environment of each rank of a ``ranks``-process job on this machine, as ``torchrun`` sets it.

    ``LOCAL_RANK``, ``NODE_RANK=0``, ``WORLD_SIZE`` and one ``MASTER_ADDR``/``MASTER_PORT`` (a free
    port) shared by all; ``ranks=1``: one process with none (no DDP job).
    """
    if ranks == 1:
        return [{}]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    shared = {"NODE_RANK": "0", "WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    return [{"LOCAL_RANK": str(rank), **shared} for rank in range(ranks)]


def run_ranks(
    command: Sequence[str], ranks: int = 2, *, cwd: str, timeout: float, **extra: str
) -> list[subprocess.CompletedProcess]:
    """Runs ``command`` once per rank, all at once, as ``torchrun`` starts a job on one machine.

    Each process gets its :func:`rank_variables`: Lightning's environment then sees processes created
    externally and re-launches nothing, so the ranks import torch and Lightning side by side
    instead of one after the other. ``ranks=1`` runs a single process with no rank variables.

    Args:
        command: the command line (e.g. ``[sys.executable, script, ...]``).
        ranks: how many processes.
        cwd: the working folder.
        timeout: seconds each rank may take; on expiry every rank is killed and it raises.
        **extra: more environment variables (on top of :func:`launch_env`).

    Returns:
        One finished process per rank, in rank order (their ``stdout`` and ``stderr`` captured).
    """
    procs = []
    for variables in rank_variables(ranks):
        procs.append(
            subprocess.Popen(
                list(command),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=launch_env(**extra, **variables),
                cwd=cwd,
            )
        )
    finished = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            finished.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return finished
