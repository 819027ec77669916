"""Process-level helpers for Lightning's DDP: launching a fresh job and ending one cleanly.

Internal (not part of the public API): the CLI, the lab and the DDP test scripts share them.
"""

from __future__ import annotations

import os

__all__ = ["RANK_VARIABLES", "launch_env", "release_process_group"]

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


def release_process_group() -> None:
    """Tears down a DDP process group before the interpreter exits.

    Left to interpreter shutdown, gloo's threads are sometimes destroyed while still joinable and
    the process aborts ("terminate called without an active exception", exit -6) after a run
    that succeeded.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
