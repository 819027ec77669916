"""Writing a benchmark's results file: ``benchmarks/results/<source>.json``, with its command, machine and date.

Every benchmark that generates figures calls :func:`write_results` (imported from here or
through ``figures``, which re-exports it); :mod:`figures` checks the docs' quotes against the
files, and :mod:`derived` writes the figures computed from measured ones with the same function.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["RESULTS", "ROOT", "command_line", "flatten", "machine", "write_results"]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def machine() -> str:
    """The machine in words: CPU count, system, Python, torch (what a figure depends on)."""
    import platform

    import torch  # only where a benchmark writes its results: checking the docs needs no torch

    return (
        f"{os.cpu_count()} CPUs, {platform.system()} {platform.machine()}, Python {platform.python_version()}, "
        f"torch {torch.__version__}"
    )


def flatten(figures: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``figures`` with nested mappings and lists flattened into dotted keys (``checks.1000000.total_ms``,
    ``interval.0``), so a benchmark hands over the results it already builds and a page names each
    figure by its path."""
    flat: dict[str, Any] = {}
    for key, value in figures.items():
        name = f"{prefix}{key}"
        if isinstance(value, (list, tuple)):
            value = {str(i): v for i, v in enumerate(value)}
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def command_line(argv: list[str] | None = None) -> str:
    """The command that ran this benchmark (``sys.argv``), as a user types it from the repository's root."""
    args = sys.argv if argv is None else argv
    return " ".join(["python", f"benchmarks/{Path(args[0]).name}", *map(shlex.quote, args[1:])])


def write_results(name: str, figures: Mapping[str, Any], command: str, folder: Path = RESULTS, **more: Any) -> Path:
    """Writes ``folder/<name>.json``: the figures a benchmark measured, with its command, machine and date.

    Args:
        name: the source name the docs quote (``<!--fig name.key-->``).
        figures: the figures (key -> number or text); nested mappings and lists are flattened
            into dotted keys (:func:`flatten`).
        command: the command that measured them, as a user types it.
        folder: where results files live.
        **more: anything else worth keeping beside them (``job=...``).
    """
    folder.mkdir(parents=True, exist_ok=True)
    result = {"command": command, **more, "machine": machine(), "date": datetime.date.today().isoformat(),
              "figures": flatten(figures)}  # fmt: skip
    path = folder / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return path
