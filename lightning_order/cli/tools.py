"""The ``audit`` and ``graph`` subcommands: their parsers and entry points, without Lightning.

:mod:`lightning_order.cli.dispatch` (the ``lightning-order`` entry point) calls them directly;
:mod:`lightning_order.cli` (LightningCLI) imports the same ones, and :data:`TOOLS` for its help.
"""

from __future__ import annotations

import sys
from typing import Literal

from jsonargparse import ArgumentParser
from rich.text import Text

from lightning_order.cli.auditing import AUDIT_UNREADABLE, audit, find_manifests
from lightning_order.cli.console import console as make_console
from lightning_order.cli.rendering import graph_marks, to_dot, to_mermaid
from lightning_order.errors import ManifestError
from lightning_order.ledger import StepLedger
from lightning_order.order import STANDARD_PIPELINE

__all__ = ["TOOLS", "audit_main", "graph_main", "tool_parser"]

#: The subcommands dispatched before LightningCLI, with their one-line help.
TOOLS: dict[str, str] = {
    "prepare": "Run the data pipeline only and write the cache and its manifest (same config as fit).",
    "audit": "Re-check prepared pipelines (a cache root, one pipeline folder or a manifest).",
    "graph": "Print the pipeline DAG as Mermaid or DOT, with executed steps and violated edges.",
}


def tool_parser(name: str) -> ArgumentParser:
    """The parser of subcommand ``name`` (for ``prepare``: the one its ``--help`` header uses)."""
    prog = f"lightning-order {name}"
    if name == "audit":
        parser = ArgumentParser(prog=prog, description=TOOLS[name], exit_on_error=False)
        parser.add_argument(
            "path",
            type=str,
            help="A cache_dir root (audits every prepared pipeline in it), one prepared pipeline's "
            "folder, or a manifest.json. Exit code: 0 clean, 1 violations, 2 unreadable/tampered.",
        )
        return parser
    if name == "graph":
        parser = ArgumentParser(prog=prog, description=TOOLS[name], exit_on_error=False)
        parser.add_argument(
            "--format", type=Literal["mermaid", "dot"], default="mermaid", help="Output format."
        )
        parser.add_argument(
            "--manifest",
            type=str | None,
            default=None,
            help="A manifest (or its folder): mark executed steps with their seq and violated edges.",
        )
        return parser
    # prepare: the full parser is LightningCLI's (the same config as fit); this one is for --help.
    parser = ArgumentParser(
        prog=prog,
        description=TOOLS[name] + " Takes the same options and --config files as fit; "
        "run `lightning-order prepare --help` for all of them.",
    )
    parser.add_argument("-c", "--config", type=str | None, default=None, help="A fit config file.")
    return parser


def audit_main(argv: list[str]) -> int:
    """``lightning-order audit PATH``: its exit code (0 clean, 1 violations, 2 unreadable)."""
    cfg = tool_parser("audit").parse_args(argv)
    return audit(cfg.path)


def graph_main(argv: list[str]) -> int:
    """``lightning-order graph``: prints the pipeline DAG (with a manifest's marks); its exit code."""
    cfg = tool_parser("graph").parse_args(argv)
    marks = graph_marks(STANDARD_PIPELINE)
    if cfg.manifest:
        try:
            ledger = StepLedger.load(find_manifests(cfg.manifest)[0])
        except ManifestError as err:
            make_console(stderr=True).print(Text(f"✗ {err}", style="bold red"))
            return AUDIT_UNREADABLE
        marks = graph_marks(STANDARD_PIPELINE, ledger)
    render = to_dot if cfg.format == "dot" else to_mermaid
    sys.stdout.write(render(STANDARD_PIPELINE, marks))
    return 0
