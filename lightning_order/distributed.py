"""The ranks of a distributed job, with or without Lightning: rank zero's log, and a clean end.

Internal (not part of the public API): the validator's core, the CLI and the DDP scripts call it.
Starting a job's ranks (their environment, one process per rank) is test and benchmark support:
``tests/launching.py``.
"""

from __future__ import annotations

import logging
import os

__all__ = ["global_rank", "rank_zero_info", "release_process_group"]

log = logging.getLogger(__name__)


def global_rank() -> int:
    """This process's rank: the process group's when one is set up, else the launcher's variables (0 alone)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def rank_zero_info(message: str) -> None:
    """Logs ``message`` at INFO on rank zero only (as Lightning's ``rank_zero_info``, without Lightning)."""
    if global_rank() == 0:
        log.info(message, stacklevel=2)


def release_process_group() -> None:
    """Tears down a DDP process group before the interpreter exits.

    Left to interpreter shutdown, gloo's threads are sometimes destroyed while still joinable and
    the process aborts ("terminate called without an active exception", exit -6) after a run
    that succeeded.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
