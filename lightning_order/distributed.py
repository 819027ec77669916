"""Ending a Lightning DDP job cleanly: the process group torn down before the interpreter exits.

Internal (not part of the public API): the CLI and the DDP scripts call it. Starting a job's
ranks (their environment, one process per rank) is test and benchmark support: ``tests/launching.py``.
"""

from __future__ import annotations

__all__ = ["release_process_group"]


def release_process_group() -> None:
    """Tears down a DDP process group before the interpreter exits.

    Left to interpreter shutdown, gloo's threads are sometimes destroyed while still joinable and
    the process aborts ("terminate called without an active exception", exit -6) after a run
    that succeeded.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
