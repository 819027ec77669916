"""``lightning-order``: LightningCLI with the order checks on by default, plus ``prepare``, ``audit``, ``graph``.

``fit``/``validate``/``test``/``predict`` are LightningCLI's own. :class:`OrderCLI` adds to them:

* the data's dims linked into the model with ``apply_on="instantiate"``: the datamodule is built
  (and its data prepared, or read from the cache) before the model, so ``init-before-data``
  cannot happen from a config;
* ``OrderValidator`` (and ``SymptomMonitor`` once it exists) appended to the trainer's callbacks,
  switched by the ``order:`` config group (``--order.validate false`` turns it off,
  ``--order.on_violation warn`` makes it warn), next to any callbacks the user configures;
* an end-of-run summary on rank 0: the ledger as a table, the final metrics, the cache and the
  checkpoints.

The three extra subcommands are dispatched by :func:`main` before LightningCLI parses anything,
because none of them should build a trainer: ``prepare`` runs the data pipeline only (what a
Kubernetes init container runs; it reads the same config files as ``fit`` and uses their
``data:`` section), ``audit PATH`` re-checks prepared pipelines from their manifests, ``graph``
prints the pipeline DAG. They are also registered on LightningCLI's parser so that
``lightning-order --help`` lists them.
"""

from __future__ import annotations

import sys
import warnings
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from jsonargparse import ArgumentParser, Namespace
from pytorch_lightning import Callback, Trainer
from pytorch_lightning.cli import LightningArgumentParser, LightningCLI
from rich.console import Console
from rich.table import Table
from rich.text import Text

from lightning_order._distributed import release_process_group
from lightning_order.checkpoint import load_checkpoint
from lightning_order.checks.ledger import check_ledger
from lightning_order.data.cache import is_complete
from lightning_order.errors import CheckpointError, LightningOrderError, ManifestError
from lightning_order.graph import graph_marks, ledger_rows, to_dot, to_mermaid
from lightning_order.ledger import CHECKPOINT_KEY, MANIFEST_NAME, StepLedger
from lightning_order.order import STANDARD_PIPELINE, Pipeline
from lightning_order.rules import Violation

__all__ = ["OrderCLI", "audit", "main"]

#: The subcommands dispatched before LightningCLI, with their one-line help.
TOOLS: dict[str, str] = {
    "prepare": "Run the data pipeline only and write the cache and its manifest (same config as fit).",
    "audit": "Re-check prepared pipelines (a cache root, one pipeline folder or a manifest).",
    "graph": "Print the pipeline DAG as Mermaid or DOT, with executed steps and violated edges.",
}

_AUDIT_OK, _AUDIT_VIOLATIONS, _AUDIT_UNREADABLE = 0, 1, 2
_CHECKPOINT_SUFFIXES = {".ckpt", ".pt", ".pth"}


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr, soft_wrap=True)  # messages stay whole lines (greppable logs)
    if not console.is_terminal:
        console.width = max(console.width, 120)  # logs and CI: no table squeezed to 80 columns
    return console


# -- the Lightning CLI -----------------------------------------------------------------------
class OrderCLI(LightningCLI):
    """LightningCLI for ordered data: dims linked at instantiation, order checks on by default.

    Defaults to ``OrderedTextClassifier`` (any ``LightningModule`` whose constructor takes the
    dims can replace it with ``--model.class_path``) and ``OrderedDataModule``.

    Example:
        A training script of one's own, with one's own model::

            from lightning_order.cli import OrderCLI
            OrderCLI(model_class=MyModel, subclass_mode_model=False)

    Args:
        model_class: the model class (default ``OrderedTextClassifier``); its constructor must
            take ``vocab_size``, ``num_features``, ``num_classes`` and ``max_length``.
        datamodule_class: the datamodule class (default ``OrderedDataModule``); it must expose
            those four as attributes (reading them prepares the data).
        subclass_mode_model: whether ``model:`` is given as ``class_path``/``init_args`` (so any
            subclass of ``model_class`` can be chosen from the config).
        save_config_kwargs: passed to LightningCLI; ``overwrite`` defaults to ``True`` here so
            that re-running a config in the same folder does not fail.
        **kwargs: anything else ``LightningCLI`` takes (``args``, ``run``, ``trainer_defaults``...).
    """

    #: The dims every model built by this CLI takes, linked from the datamodule's attributes.
    DIMS: tuple[str, ...] = ("vocab_size", "num_features", "num_classes", "max_length")

    def __init__(
        self,
        model_class: Any = None,
        datamodule_class: Any = None,
        *,
        subclass_mode_model: bool = True,
        save_config_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if model_class is None:
            from lightning_order.models import OrderedTextClassifier

            model_class = OrderedTextClassifier
        if datamodule_class is None:
            from lightning_order.data import OrderedDataModule

            datamodule_class = OrderedDataModule
        super().__init__(
            model_class,
            datamodule_class,
            subclass_mode_model=subclass_mode_model,
            save_config_kwargs={"overwrite": True, **(save_config_kwargs or {})},
            **kwargs,
        )

    # -- parser ----------------------------------------------------------------------------
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Adds the ``order:`` group and links the data's dims into the model."""
        parser.add_argument(
            "--order.validate",
            type=bool,
            default=True,
            help="Add OrderValidator to the trainer's callbacks (checks the order before step 1).",
        )
        parser.add_argument(
            "--order.on_violation",
            type=Literal["raise", "warn"],
            default="raise",
            help="What OrderValidator does on a violation: raise OrderError, or warn and go on.",
        )
        parser.add_argument(
            "--order.symptoms",
            type=bool,
            default=True,
            help="Add SymptomMonitor (diagnoses training symptoms of order errors) when available.",
        )
        if self.subclass_mode_model:
            model_class = self._model_class
            parser.set_defaults(
                {"model": {"class_path": f"{model_class.__module__}.{model_class.__qualname__}"}}
            )
        prefix = "model.init_args" if self.subclass_mode_model else "model"
        for dim in self.DIMS:
            # Read off the *instantiated* datamodule: the model is built after the data is known.
            parser.link_arguments(f"data.{dim}", f"{prefix}.{dim}", apply_on="instantiate")

    def setup_parser(
        self, add_subcommands: bool, main_kwargs: dict[str, Any], subparser_kwargs: dict[str, Any]
    ) -> None:
        """LightningCLI's parser, with ``prepare``, ``audit`` and ``graph`` listed in ``--help``."""
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        if add_subcommands and self.parser._subcommands_action is not None:
            # main() runs these before LightningCLI parses; registering them here is what makes
            # `lightning-order --help` list them next to fit/validate/test/predict.
            for name, help_text in TOOLS.items():
                self.parser._subcommands_action.add_subcommand(name, _tool_parser(name), help=help_text)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parses as LightningCLI does; the extra subcommands are refused (``main`` runs them)."""
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        if subcommand in TOOLS:
            parser.error(
                f"'{subcommand}' is run by lightning_order.cli.main (the `lightning-order` command), "
                f"not by OrderCLI: call main(['{subcommand}', ...])"
            )

    # -- trainer ---------------------------------------------------------------------------
    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """Builds the trainer with the order callbacks appended to the configured ones."""
        config = self.config_init.get(str(self.subcommand), self.config_init)
        order = self.config.get(str(self.subcommand), self.config).get("order")
        trainer_config = config.get("trainer")
        if trainer_config is not None and order is not None:
            callbacks = trainer_config.get("callbacks") or []
            if not isinstance(callbacks, list):
                callbacks = [callbacks]
            trainer_config["callbacks"] = [*callbacks, *order_callbacks(order, callbacks)]
        return super().instantiate_trainer(**kwargs)

    # -- end-of-run summaries --------------------------------------------------------------
    def after_fit(self) -> None:
        """Prints the summary of the run (rank 0)."""
        self._summary("fit")

    def after_validate(self) -> None:
        """Prints the summary of the run (rank 0)."""
        self._summary("validate")

    def after_test(self) -> None:
        """Prints the summary of the run (rank 0)."""
        self._summary("test")

    def _summary(self, stage: str) -> None:
        trainer = self.trainer
        if trainer is None or not trainer.is_global_zero:
            return
        console = _console()
        ledger = getattr(self.datamodule, "ledger", None)
        if isinstance(ledger, StepLedger) and len(ledger):
            console.print(ledger_table(ledger, title=f"lightning-order {stage}: the ledger"))
            _print_violations(console, check_ledger(ledger))
        metrics = _scalar_metrics(trainer.callback_metrics)
        if metrics:
            table = Table(title="final metrics", title_justify="left")
            table.add_column("metric")
            table.add_column("value", justify="right")
            for name, value in sorted(metrics.items()):
                table.add_row(name, f"{value:.4f}")
            console.print(table)
        for label, where in _locations(self.datamodule, trainer, stage):
            console.print(Text.assemble((f"{label}: ", "bold"), str(where)))


def order_callbacks(order: Namespace | dict[str, Any], existing: Iterable[Callback] = ()) -> list[Callback]:
    """The order callbacks to add, from the ``order:`` config group.

    A callback of a kind the user already configured is not added twice.

    Args:
        order: ``validate`` (bool), ``on_violation`` (``raise``/``warn``), ``symptoms`` (bool).
        existing: the callbacks already configured.

    Returns:
        ``[OrderValidator(...)]`` plus ``SymptomMonitor()`` where it exists and is asked for.
    """
    from lightning_order import callbacks as order_callbacks_module

    existing = list(existing)
    added: list[Callback] = []
    validator_cls = getattr(order_callbacks_module, "OrderValidator", None)
    if order.get("validate", True) and validator_cls is not None:
        if not any(isinstance(cb, validator_cls) for cb in existing):
            added.append(validator_cls(on_violation=order.get("on_violation", "raise")))
    # SymptomMonitor (issue 6): added by default once lightning_order.callbacks exports it.
    monitor_cls = getattr(order_callbacks_module, "SymptomMonitor", None)
    if order.get("symptoms", True) and monitor_cls is not None:
        if not any(isinstance(cb, monitor_cls) for cb in existing):
            added.append(monitor_cls())
    return added


class _PrepareCLI(OrderCLI):
    """``lightning-order prepare``: parses a fit config, builds the datamodule, prepares, stops.

    The trainer is never built (an init container may have no accelerator), and neither is the
    model: only the ``data:`` section of the config matters here.
    """

    def instantiate_classes(self) -> None:
        """Builds the datamodule only, then prepares its data and prints what was done."""
        config = self.config.clone()
        del config["model"]  # jsonargparse then instantiates the data group alone (any subclass)
        self.config_init = self.parser.instantiate_classes(config)
        self.datamodule = self.config_init["data"]
        self.model = None
        self.trainer = None  # type: ignore[assignment]
        self.datamodule.prepare_data()  # a no-op when the cache of this configuration is complete
        _prepare_report(self.datamodule)


def _prepare_report(datamodule: Any) -> None:
    console = _console()
    cache_path = getattr(datamodule, "cache_path", None)
    ledger = None
    if cache_path is not None and (Path(cache_path) / MANIFEST_NAME).is_file():
        ledger = StepLedger.load(cache_path)
    elif isinstance(getattr(datamodule, "ledger", None), StepLedger):
        ledger = datamodule.ledger
    if ledger is not None:
        console.print(ledger_table(ledger, title="lightning-order prepare: the ledger"))
        _print_violations(console, check_ledger(ledger))
        dims = ledger.info.get("dims")
        if dims:
            console.print(Text.assemble(("dims: ", "bold"), ", ".join(f"{k}={v}" for k, v in dims.items())))
    if cache_path is not None:
        console.print(Text.assemble(("prepared data: ", "bold"), str(cache_path)))
        console.print(Text.assemble(("manifest: ", "bold"), str(Path(cache_path) / MANIFEST_NAME)))


def _scalar_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    scalars = {}
    for name, value in metrics.items():
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                continue
            value = value.item()
        if isinstance(value, (int, float)):
            scalars[name] = float(value)
    return scalars


def _locations(datamodule: Any, trainer: Trainer, stage: str) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    cache_path = getattr(datamodule, "cache_path", None)
    if cache_path is not None:
        found.append(("prepared data (cache)", cache_path))
    checkpoint = trainer.checkpoint_callback
    if stage != "fit":
        if trainer.ckpt_path:
            found.append(("checkpoint evaluated", trainer.ckpt_path))
    elif checkpoint is not None:
        best = getattr(checkpoint, "best_model_path", "")
        last = getattr(checkpoint, "last_model_path", "")
        dirpath = getattr(checkpoint, "dirpath", None)
        if best:
            found.append(("best checkpoint", best))
        elif last:
            found.append(("last checkpoint", last))
        elif dirpath:
            found.append(("checkpoints", dirpath))
    logger = trainer.logger
    log_dir = getattr(logger, "log_dir", None) if logger is not None else None
    if log_dir:
        found.append(("logs and config", log_dir))
    return found


# -- tables ----------------------------------------------------------------------------------
def ledger_table(
    ledger: StepLedger, title: str | None = None, pipeline: Pipeline = STANDARD_PIPELINE
) -> Table:
    """The ledger as a rich table: step, seq, kind, fitted on, rows, fingerprint.

    Args:
        ledger: the records to show.
        title: the table's title.
        pipeline: where step kinds come from.
    """
    table = Table(title=title, title_justify="left")
    for column, justify in (
        ("step", "left"),
        ("seq", "right"),
        ("kind", "left"),
        ("fitted on", "left"),
        ("rows", "right"),
        ("fingerprint", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in ledger_rows(ledger, pipeline):
        table.add_row(*(Text(cell) for cell in row))  # Text: no rich markup in step names
    return table


def _print_violations(console: Console, violations: Sequence[Violation]) -> None:
    if not violations:
        console.print(Text("✓ the order is correct: no violation", style="green"))
        return
    count = len(violations)
    console.print(Text(f"✗ {count} order violation{'s' if count != 1 else ''}:", style="bold red"))
    for number, violation in enumerate(violations, start=1):
        console.print(Text(f"  {number}. {violation.describe()}"))


# -- audit -----------------------------------------------------------------------------------
def find_manifests(path: str | Path) -> list[Path]:
    """The manifests under ``path``: a manifest file, one pipeline's folder, or a cache root.

    Args:
        path: a ``manifest.json`` (or a checkpoint, whose ledger :func:`audit` reads), a folder
            holding one, or a ``cache_dir`` root holding ``<cache_key>/manifest.json`` folders.

    Raises:
        ManifestError: nothing is there, or no manifest is found under it.
    """
    target = Path(path).expanduser()
    if target.is_file():
        return [target]
    if not target.exists():
        raise ManifestError(f"no such file or folder: {target}")
    if (target / MANIFEST_NAME).is_file():
        return [target / MANIFEST_NAME]
    found = sorted(target.glob(f"*/{MANIFEST_NAME}")) or sorted(target.rglob(MANIFEST_NAME))
    if not found:
        raise ManifestError(
            f"no {MANIFEST_NAME} under {target}: expected a cache root (<cache_dir>/<cache_key>/"
            f"{MANIFEST_NAME}), one prepared pipeline's folder, or a manifest file; run "
            "`lightning-order prepare --config ...` first"
        )
    return found


def audit(path: str | Path, pipeline: Pipeline = STANDARD_PIPELINE, console: Console | None = None) -> int:
    """Re-checks every prepared pipeline under ``path`` and prints a table for each.

    Args:
        path: a cache root, one prepared pipeline's folder, a manifest file, or a checkpoint
            (its ledger is checked; it is read with ``weights_only=True``, so nothing in it runs).
        pipeline: the pipeline to check against.
        console: where to print (default: stdout).

    Returns:
        The exit code: 0 when every ledger is clean, 1 when any has a violation, 2 when a
        manifest is missing, unreadable or tampered with, or a prepared folder lacks its data.
    """
    console = console or _console()
    try:
        manifests = find_manifests(path)
    except ManifestError as err:
        console.print(Text(f"✗ {err}", style="bold red"))
        return _AUDIT_UNREADABLE
    code = _AUDIT_OK
    for manifest in manifests:
        console.rule(Text(str(manifest)))
        try:
            ledger = _checkpoint_ledger(manifest) if _is_checkpoint(manifest) else StepLedger.load(manifest)
        except (ManifestError, CheckpointError) as err:
            console.print(Text(f"✗ unreadable manifest: {err}", style="bold red"))
            code = _AUDIT_UNREADABLE
            continue
        console.print(ledger_table(ledger, pipeline=pipeline))
        dims = ledger.info.get("dims")
        if dims:
            console.print(Text("dims: " + ", ".join(f"{k}={v}" for k, v in dims.items())))
        violations = check_ledger(ledger, pipeline)
        _print_violations(console, violations)
        if violations and code == _AUDIT_OK:
            code = _AUDIT_VIOLATIONS
        key = ledger.info.get("cache_key")
        if key and manifest.parent.name == key and not is_complete(manifest.parent, key):
            # A prepared pipeline's folder whose data files are missing or half written.
            console.print(
                Text(
                    f"✗ {manifest.parent} is incomplete: its data files are missing or partial; "
                    "prepare the data again",
                    style="bold red",
                )
            )
            code = _AUDIT_UNREADABLE
    if len(manifests) > 1:
        verdict = {0: "all clean", 1: "violations found", 2: "unreadable manifests"}[code]
        console.print(Text(f"{len(manifests)} prepared pipelines audited: {verdict}", style="bold"))
    return code


def _is_checkpoint(path: Path) -> bool:
    return path.name != MANIFEST_NAME and (path.suffix in _CHECKPOINT_SUFFIXES or zipfile.is_zipfile(path))


def _checkpoint_ledger(path: Path) -> StepLedger:
    """The ledger a checkpoint carries, read with ``weights_only=True`` (nothing in it runs)."""
    state = (load_checkpoint(path).get(CHECKPOINT_KEY) or {}).get("ledger")
    if not state:
        raise ManifestError(
            f"the checkpoint {path} carries no lightning_order ledger (saved without OrderValidator "
            "and an OrderedDataModule): nothing to audit; audit the cache it was trained on instead"
        )
    return StepLedger.from_state_dict(state)


# -- the extra subcommands' parsers and entry points -----------------------------------------
def _tool_parser(name: str) -> ArgumentParser:
    prog = f"lightning-order {name}"
    if name == "audit":
        parser = ArgumentParser(prog=prog, description=TOOLS[name], exit_on_error=True)
        parser.add_argument(
            "path",
            type=str,
            help="A cache_dir root (audits every prepared pipeline in it), one prepared pipeline's "
            "folder, or a manifest.json. Exit code: 0 clean, 1 violations, 2 unreadable/tampered.",
        )
        return parser
    if name == "graph":
        parser = ArgumentParser(prog=prog, description=TOOLS[name])
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


def _audit_main(argv: list[str]) -> int:
    cfg = _tool_parser("audit").parse_args(argv)
    return audit(cfg.path)


def _graph_main(argv: list[str]) -> int:
    cfg = _tool_parser("graph").parse_args(argv)
    marks = graph_marks(STANDARD_PIPELINE)
    if cfg.manifest:
        try:
            ledger = StepLedger.load(find_manifests(cfg.manifest)[0])
        except ManifestError as err:
            _console(stderr=True).print(Text(f"✗ {err}", style="bold red"))
            return _AUDIT_UNREADABLE
        marks = graph_marks(STANDARD_PIPELINE, ledger)
    render = to_dot if cfg.format == "dot" else to_mermaid
    sys.stdout.write(render(STANDARD_PIPELINE, marks))
    return 0


def _run_cli(cli_class: type[OrderCLI], args: list[str] | None, **kwargs: Any) -> OrderCLI:
    with warnings.catch_warnings():
        # We may hand LightningCLI the arguments after `prepare` (or a caller's list); its warning
        # about also seeing sys.argv is meant for scripts that pass both by mistake.
        warnings.filterwarnings("ignore", message=".*args parameter is intended to run from within Python.*")
        return cli_class(args=args, **kwargs)


def main(args: list[str] | None = None) -> int:
    """The ``lightning-order`` command.

    Args:
        args: the command line after the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit code (``audit`` returns 1 on violations and 2 on unreadable manifests).
    """
    argv = list(sys.argv[1:] if args is None else args)
    command = argv[0] if argv else None
    try:
        if command == "audit":
            return _audit_main(argv[1:])
        if command == "graph":
            return _graph_main(argv[1:])
        if command == "prepare":
            parser_kwargs = {"prog": "lightning-order prepare", "description": TOOLS["prepare"]}
            _run_cli(_PrepareCLI, argv[1:], run=False, parser_kwargs=parser_kwargs)
            return 0
        # args=None lets LightningCLI read sys.argv itself, which Lightning's DDP launcher re-runs.
        try:
            _run_cli(OrderCLI, args, parser_kwargs={"prog": "lightning-order"})
        finally:
            release_process_group()
    except LightningOrderError as err:
        _console(stderr=True).print(Text(f"lightning-order: {type(err).__name__}: {err}", style="bold red"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
