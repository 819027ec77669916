"""``lightning-order audit``: re-check prepared pipelines from their manifests, or a checkpoint's ledger.

Reads only JSON manifests and, for a checkpoint, its ``lightning_order`` entry through
:func:`~lightning_order.checkpoint.load_checkpoint` (``weights_only=True``: nothing in it runs).
The exit code tells a script what was found.
"""

from __future__ import annotations

import stat
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from lightning_order.checkpoint import SHARDED_META, is_sharded_checkpoint, load_checkpoint, read_sharded_meta
from lightning_order.cli.console import console as make_console
from lightning_order.cli.console import ledger_table, print_violations
from lightning_order.data.engine.cache import cache_problems
from lightning_order.data.engine.storage import verify_files
from lightning_order.errors import CheckpointError, ManifestError
from lightning_order.ledger import CHECKPOINT_KEY, MANIFEST_NAME, StepLedger
from lightning_order.manifest_checks import file_kind
from lightning_order.order import Pipeline
from lightning_order.pipelines import PIPELINES, spec_for

__all__ = [
    "AUDIT_OK",
    "AUDIT_UNREADABLE",
    "AUDIT_VIOLATIONS",
    "audit",
    "find_manifests",
    "read_ledger",
    "unreadable_reason",
]

#: audit's exit codes: every ledger clean, a violation found, a manifest (or checkpoint) unreadable.
AUDIT_OK, AUDIT_VIOLATIONS, AUDIT_UNREADABLE = 0, 1, 2
_CHECKPOINT_SUFFIXES = {".ckpt", ".pt", ".pth"}


def find_manifests(path: str | Path) -> list[Path]:
    """The manifests under ``path``: a manifest file, one pipeline's folder, or a cache root.

    Args:
        path: a ``manifest.json`` (or a checkpoint, whose ledger :func:`audit` reads; a distributed
            checkpoint folder: its ``meta.pt``), a folder holding one, or a ``cache_dir`` root
            holding ``<cache_key>/manifest.json`` folders.

    Raises:
        ManifestError: nothing is there, or no manifest is found under it.
    """
    target = Path(path).expanduser()
    if not target.exists():
        raise ManifestError(f"no such file or folder: {target}")
    if not target.is_dir():
        return [target]  # a FIFO or device too: read_ledger refuses it as unreadable, never opens it
    if (target / MANIFEST_NAME).exists():
        return [target / MANIFEST_NAME]
    if is_sharded_checkpoint(target):  # a distributed checkpoint: its ledger is in meta.pt
        return [target / SHARDED_META]
    found = sorted(target.glob(f"*/{MANIFEST_NAME}")) or sorted(target.rglob(MANIFEST_NAME))
    if not found:
        raise ManifestError(
            f"no {MANIFEST_NAME} under {target}: expected a cache root (<cache_dir>/<cache_key>/"
            f"{MANIFEST_NAME}), one prepared pipeline's folder, or a manifest file; run "
            "`lightning-order prepare --config ...` first"
        )
    return found


def audit(path: str | Path, pipeline: Pipeline | None = None, console: Console | None = None) -> int:
    """Re-checks every prepared pipeline under ``path`` and prints a table for each.

    Args:
        path: a cache root, one prepared pipeline's folder, a manifest file, or a checkpoint
            (its ledger is checked; it is read with ``weights_only=True``, so nothing in it runs).
        pipeline: the pipeline to check against; ``None``: each ledger's own (its spec,
            named by ``info["pipeline"]``, else known by its steps: an LM cache or a hand-written
            LM pipeline's checkpoint is judged by ``LM_PIPELINE`` and the LM ledger checks, and
            its figures are printed under the table: documents, duplicates removed, the
            tokenizer's origin, tokens, end-of-text, blocks, dropped tokens).
        console: where to print (default: stdout).

    Returns:
        The exit code: 0 when every ledger is clean, 1 when any has a violation, 2 when a
        manifest is missing, unreadable or tampered with, or a prepared folder's files are
        missing, partial or changed (each verified against the manifest's xxh3 hashes, whatever
        the folder is named). Never an exception: a FIFO or device (never opened), a re-sealed
        manifest with odd records or facts, or deeply nested JSON is one "unreadable" line, 2.
    """
    out = console or make_console()
    try:
        manifests = find_manifests(path)
    except ManifestError as err:
        out.print(Text(f"✗ {err}", style="bold red"))
        return AUDIT_UNREADABLE
    code = AUDIT_OK
    for manifest in manifests:
        out.rule(Text(str(manifest)))
        try:
            found = _audit_one(out, manifest, pipeline)
        except BrokenPipeError:  # the reader went away: no manifest's fault (the command's exit code says it)
            raise
        except Exception as err:
            # Exit 1 means "violations" to a script: whatever a malformed manifest trips is unreadable.
            out.print(Text(f"✗ unreadable manifest: {unreadable_reason(manifest, err)}", style="bold red"))
            found = AUDIT_UNREADABLE
        code = max(code, found)
    if len(manifests) > 1:
        verdict = {0: "all clean", 1: "violations found", 2: "unreadable manifests"}[code]
        out.print(Text(f"{len(manifests)} prepared pipelines audited: {verdict}", style="bold"))
    return code


def read_ledger(path: Path) -> StepLedger:
    """The ledger of a manifest or a checkpoint, refused unless it is a regular file and its facts have their types.

    Raises:
        ManifestError: ``path`` is a FIFO, device or other non-regular file (never opened, so
            nothing hangs), the manifest is unreadable or malformed, or an ``info`` fact that
            ``audit`` and ``graph`` read (``dims``, ``pipeline``, ``cache_key``, ``files``) is of
            the wrong type or names no pipeline.
        CheckpointError: the checkpoint cannot be read.
    """
    try:
        mode = path.stat().st_mode
    except OSError as err:
        raise ManifestError(f"{path} cannot be read ({err.strerror})") from None
    if not stat.S_ISREG(mode):
        raise ManifestError(
            f"{path} is {file_kind(mode)}, not a regular file: not a manifest or a checkpoint"
        )
    ledger = _checkpoint_ledger(path) if _is_checkpoint(path) else StepLedger.load(path)
    _check_info(path, ledger.info)
    return ledger


def unreadable_reason(path: Path, err: Exception) -> str:
    """One line saying why the manifest (or checkpoint) at ``path`` cannot be judged, naming it."""
    if isinstance(err, (ManifestError, CheckpointError)):
        text = str(err)
        return text if str(path) in text else f"{path}: {text}"
    detail = str(err).splitlines()[0] if str(err) else ""
    return (
        f"{path}: its content could not be checked ({type(err).__name__}{': ' + detail if detail else ''}); "
        "prepare the data again rather than trusting it"
    )


def _audit_one(out: Console, manifest: Path, pipeline: Pipeline | None) -> int:
    """Prints one ledger's table, figures and violations, and verifies its prepared folder; its exit code."""
    ledger = read_ledger(manifest)
    spec = spec_for(ledger=ledger)
    judged = pipeline or spec.pipeline
    out.print(ledger_table(ledger, pipeline=judged))
    dims = ledger.info.get("dims")
    if dims:
        out.print(Text("dims: " + ", ".join(f"{k}={v}" for k, v in dims.items())))
    print_figures(out, spec.ledger_figures(ledger))
    violations = spec.check(ledger, judged)
    print_violations(out, violations)
    problems = _folder_problems(manifest, ledger, spec.files)
    if problems:
        # A prepared pipeline's folder whose files are missing, partial or changed (xxh3-verified).
        out.print(
            Text(
                f"✗ {manifest.parent} is incomplete or damaged: "
                + "; ".join(problems)
                + "; prepare the data again (the next run rebuilds it)",
                style="bold red",
            )
        )
        return AUDIT_UNREADABLE
    return AUDIT_VIOLATIONS if violations else AUDIT_OK


def _folder_problems(manifest: Path, ledger: StepLedger, required: Sequence[str]) -> list[str]:
    # A manifest that names a cache key was written by preparation: its folder's files are verified
    # under whatever name the folder has now (renamed, copied, moved). A checkpoint's ledger names
    # the key too, but no folder travels with it.
    if not ledger.info.get("cache_key") or _is_checkpoint(manifest):
        return []
    if manifest.name == MANIFEST_NAME:
        return cache_problems(manifest.parent, required=required)
    return verify_files(manifest.parent, ledger.info.get("files") or {})


def _check_info(path: Path, info: dict[str, Any]) -> None:
    """Refuses ``info`` facts of the wrong type before a table, graph or check reads them."""
    expected = {"dims": Mapping, "cache_key": str, "files": Mapping}
    for name, kind in expected.items():
        if name in info and not isinstance(info[name], kind):
            raise ManifestError(
                f"{path}: info[{name!r}] must be a {'mapping' if kind is Mapping else 'string'}, "
                f"got {type(info[name]).__name__}; prepare the data again rather than trusting it"
            )
    odd = [name for name, entry in (info.get("files") or {}).items() if not _is_file_record(entry)]
    if odd:
        raise ManifestError(
            f"{path}: info['files'][{odd[0]!r}] is not a file record (a mapping with an integer 'size' and "
            "a string 'xxh3'); prepare the data again rather than trusting it"
        )
    recorded = info.get("pipeline")
    if recorded and str(recorded) not in PIPELINES:
        raise ManifestError(
            f"{path} names pipeline {recorded!r}, which is none of {', '.join(PIPELINES)}: "
            "it was written by another tool or edited"
        )


def _is_file_record(entry: Any) -> bool:
    return (
        isinstance(entry, Mapping)
        and isinstance(entry.get("size"), int)
        and not isinstance(entry.get("size"), bool)
        and isinstance(entry.get("xxh3"), str)
    )


def _is_checkpoint(path: Path) -> bool:
    # A torch.save file is a zip archive; older pickles are recognised by their suffix.
    return path.name != MANIFEST_NAME and (path.suffix in _CHECKPOINT_SUFFIXES or zipfile.is_zipfile(path))


def _checkpoint_ledger(path: Path) -> StepLedger:
    """The ledger a checkpoint carries, read with ``weights_only=True`` (nothing in it runs)."""
    sharded = path.name == SHARDED_META and is_sharded_checkpoint(path.parent)
    checkpoint = (
        read_sharded_meta(path.parent) if sharded else load_checkpoint(path)
    )  # the folder's shards too
    state = (checkpoint.get(CHECKPOINT_KEY) or {}).get("ledger")
    if not state:
        raise ManifestError(
            f"the checkpoint {path} carries no lightning_order ledger (saved without OrderValidator "
            "and an OrderedDataModule): nothing to audit; audit the cache it was trained on instead"
        )
    return StepLedger.from_state_dict(state)


def print_figures(console: Any, figures: list[tuple[str, str]]) -> None:
    """Prints a pipeline's figures (its spec's ``figures``) as one ``label: text`` line each."""
    for label, text in figures:
        console.print(Text.assemble((f"{label}: ", "bold"), text))
