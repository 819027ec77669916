"""The ``audit``, ``graph`` and ``export`` subcommands: their parsers and entry points, without Lightning.

:mod:`lightning_order.cli.dispatch` (the ``lightning-order`` entry point) calls them directly;
:class:`~lightning_order.cli.lightning.OrderCLI` registers the same parsers for its ``--help``.
"""

from __future__ import annotations

import sys
from argparse import ArgumentError
from typing import Any, Literal

from jsonargparse import ArgumentParser
from rich.text import Text

from lightning_order.cli.auditing import (
    AUDIT_UNREADABLE,
    audit,
    find_manifests,
    read_ledger,
    unreadable_reason,
)
from lightning_order.cli.console import console as make_console
from lightning_order.cli.help import TOOLS
from lightning_order.cli.parsing import STRICT_PARSER, parser_options, with_suggestions
from lightning_order.cli.rendering import graph_marks, to_dot, to_mermaid
from lightning_order.errors import ManifestError
from lightning_order.pipelines import DEFAULT_PIPELINE, PIPELINES, spec_for

__all__ = ["audit_main", "export_main", "graph_main", "tool_parser"]


def tool_parser(name: str) -> ArgumentParser:
    """The parser of subcommand ``name`` (for ``prepare``: the one its ``--help`` header uses)."""
    prog = f"lightning-order {name}"
    if name == "audit":
        parser = ArgumentParser(prog=prog, description=TOOLS[name], exit_on_error=False, **STRICT_PARSER)
        parser.add_argument(
            "path",
            type=str,
            help="A cache_dir root (audits every prepared pipeline in it), one prepared pipeline's "
            "folder, a manifest.json, or a checkpoint (a .ckpt file, or a distributed checkpoint folder "
            "whose meta.pt carries the ledger; read with weights_only=True). Exit code: 0 clean, "
            "1 violations, 2 unreadable/tampered.",
        )
        return parser
    if name == "graph":
        parser = ArgumentParser(prog=prog, description=TOOLS[name], exit_on_error=False, **STRICT_PARSER)
        parser.add_argument(
            "--format", type=Literal["mermaid", "dot"], default="mermaid", help="Output format."
        )
        parser.add_argument(
            "--manifest",
            type=str | None,
            default=None,
            help="A manifest (or its folder): draw its pipeline, mark executed steps with their seq and "
            "violated edges.",
        )
        parser.add_argument(
            "--pipeline",
            type=Literal[tuple(PIPELINES)],  # type: ignore[valid-type]
            default=DEFAULT_PIPELINE,
            help="The pipeline to draw without a manifest.",
        )
        return parser
    if name == "export":
        parser = ArgumentParser(prog=prog, description=TOOLS[name], exit_on_error=False, **STRICT_PARSER)
        parser.add_argument(
            "checkpoint", type=str, help="A checkpoint file of an OrderedCausalLM fit (.ckpt)."
        )
        parser.add_argument(
            "out_dir",
            type=str,
            help="The folder to write: AutoModelForCausalLM.from_pretrained and AutoTokenizer.from_pretrained load it.",
        )
        parser.add_argument(
            "--tokenizer",
            type=str | None,
            default=None,
            help="The run's tokenizer folder (default: tokenizer/ beside the checkpoint, where the LM DataModule writes it).",
        )
        return parser
    # prepare: the full parser is LightningCLI's (the same config as fit); this one is for --help.
    parser = ArgumentParser(
        prog=prog,
        **STRICT_PARSER,
        description=TOOLS[name] + " Takes the same options and --config files as fit; "
        "run `lightning-order prepare --help` for all of them.",
    )
    parser.add_argument("-c", "--config", type=str | None, default=None, help="A fit config file.")
    return parser


def audit_main(argv: list[str]) -> int:
    """``lightning-order audit PATH``: its exit code (0 clean, 1 violations, 2 unreadable)."""
    cfg = _parse("audit", argv)
    return audit(cfg.path)


def graph_main(argv: list[str]) -> int:
    """``lightning-order graph``: prints the pipeline DAG (with a manifest's marks); its exit code.

    With ``--manifest`` the graph is the manifest's own pipeline (``info["pipeline"]``), so an LM
    cache is drawn as :data:`~lightning_order.LM_PIPELINE`; without, ``--pipeline`` names it.
    """
    cfg = _parse("graph", argv)
    spec = PIPELINES[cfg.pipeline]
    marks = graph_marks(spec.pipeline)
    if cfg.manifest:
        err_console = make_console(stderr=True)
        try:
            manifest = find_manifests(cfg.manifest)[0]
        except ManifestError as err:
            err_console.print(Text(f"✗ {err}", style="bold red"))
            return AUDIT_UNREADABLE
        try:
            ledger = read_ledger(manifest)
            spec = spec_for(ledger=ledger)
            marks = graph_marks(spec.pipeline, ledger, spec.check(ledger))
        except Exception as err:
            # Exit codes are audit's: whatever a malformed manifest trips is "unreadable" (2).
            err_console.print(Text(f"✗ {unreadable_reason(manifest, err)}", style="bold red"))
            return AUDIT_UNREADABLE
    render = to_dot if cfg.format == "dot" else to_mermaid
    sys.stdout.write(render(spec.pipeline, marks))
    return 0


def export_main(argv: list[str]) -> int:
    """``lightning-order export CHECKPOINT OUT_DIR``: writes the ``transformers`` folder; 0 when written."""
    cfg = _parse("export", argv)
    # torch and transformers: imported for this command only
    from lightning_order.models.export import export_causal_lm

    out = export_causal_lm(cfg.checkpoint, cfg.out_dir, cfg.tokenizer)
    sys.stdout.write(
        f"exported: {out} (AutoModelForCausalLM.from_pretrained and AutoTokenizer.from_pretrained load it)\n"
    )
    return 0


def _parse(name: str, argv: list[str]) -> Any:
    """``argv`` parsed by subcommand ``name``'s parser; a rejected option names the nearest valid one."""
    parser = tool_parser(name)
    try:
        return parser.parse_args(argv)
    except ArgumentError as err:
        raise with_suggestions(err, parser_options(parser), argv) from err
