"""``lightning-order``: LightningCLI with the order checks on by default, plus ``prepare``, ``audit``, ``graph``.

``fit``/``validate``/``test``/``predict`` are LightningCLI's own. :class:`OrderCLI` adds to them:

* the data's dims linked into the model with ``apply_on="instantiate"``: the datamodule is built
  (and its data prepared, or read from the cache) before the model, so ``init-before-data``
  cannot happen from a config;
* ``OrderValidator`` and ``SymptomMonitor`` appended to the trainer's callbacks, switched by the
  ``order:`` config group (``--order.validate false`` turns the validator off,
  ``--order.on_violation warn`` makes it warn, ``--order.symptoms false`` drops the monitor),
  next to any callbacks the user configures;
* an end-of-run summary on rank 0: the ledger as a table, the final metrics, the cache and the
  checkpoints;
* every user error (a ``lightning_order`` error, a constructor refusing its configured arguments,
  an option jsonargparse rejects) printed by :func:`main` as one line per finding with its fix,
  and a non-zero exit code: 1 for a refused run, 2 for a rejected command line; no traceback.

The three extra subcommands are dispatched by :func:`main` before LightningCLI parses anything,
because none of them should build a trainer: ``prepare`` runs the data pipeline only (what a
Kubernetes init container runs; it reads the same config files as ``fit`` and uses their
``data:`` section), ``audit PATH`` re-checks prepared pipelines from their manifests, ``graph``
prints the pipeline DAG. They are also registered on LightningCLI's parser so that
``lightning-order --help`` lists them.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from argparse import ArgumentError
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from jsonargparse import Namespace
from jsonargparse.typing import import_object
from pytorch_lightning import Callback, Trainer
from pytorch_lightning.cli import LightningArgumentParser, LightningCLI
from rich.text import Text

from lightning_order.callbacks import OrderValidator, SymptomMonitor
from lightning_order.checks.ledger import check_ledger
from lightning_order.cli.auditing import audit, find_manifests
from lightning_order.cli.console import (
    configuration_errors,
    error_lines,
    ledger_table,
    locations,
    prepare_report,
    print_error,
    print_metrics,
    print_violations,
    scalar_metrics,
)
from lightning_order.cli.console import console as make_console
from lightning_order.cli.tools import TOOLS
from lightning_order.cli.tools import audit_main as _audit_main
from lightning_order.cli.tools import graph_main as _graph_main
from lightning_order.cli.tools import tool_parser as _tool_parser
from lightning_order.distributed import release_process_group
from lightning_order.errors import LightningOrderError
from lightning_order.ledger import StepLedger
from lightning_order.order import STANDARD_PIPELINE, Pipeline

# audit, find_manifests and ledger_table live in lightning_order.cli.auditing and lightning_order.cli.console;
# they stay importable from here, where the command line reaches them.
__all__ = ["OrderCLI", "audit", "find_manifests", "ledger_table", "main", "order_callbacks"]

# The subcommands dispatched before LightningCLI (TOOLS: their one-line help) and their parsers
# live in lightning_order.cli.tools, which the light entry point (lightning_order.cli.dispatch) imports.
#: Exit codes of main() for user errors: a run refused (any lightning_order error), a command line
#: rejected (jsonargparse), as argparse does.
EXIT_REFUSED, EXIT_USAGE = 1, 2


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
            "--order.planned_hours",
            type=float | None,
            default=None,
            help="How long the run is planned to train (hours): OrderValidator prices the waste it prevents.",
        )
        parser.add_argument(
            "--order.gpu_hour_price",
            type=float | None,
            default=None,
            help="The price of one device-hour, for the waste estimate in OrderValidator's report.",
        )
        parser.add_argument(
            "--order.overlap_threshold",
            type=float,
            default=0.01,
            help="Largest share of validation rows with an identical train twin that passes "
            "(datamodules without key hashes); 1.0 turns the check off.",
        )
        parser.add_argument(
            "--order.symptoms",
            type=bool,
            default=True,
            help="Add SymptomMonitor (diagnoses training symptoms of order errors).",
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
        config = self.config.get(subcommand, self.config) if subcommand else self.config
        overridden = _dims_set_by_user(config.get("model"), self.DIMS)
        if overridden:
            shown = ", ".join(f"{prefix}.{dim}={value}" for prefix, dim, value in overridden)
            parser.error(
                f"{shown}: the model's dims come from the data (data.<dim> is linked into the model when "
                "it is built, so a value here would be silently replaced); remove it, and change the "
                f"data instead (e.g. --data.{overridden[0][1]}) or pass another --model.class_path"
            )
        if subcommand in TOOLS:
            parser.error(
                f"'{subcommand}' is run by lightning_order.cli.main (the `lightning-order` command), "
                f"not by OrderCLI: call main(['{subcommand}', ...])"
            )

    def instantiate_classes(self) -> None:
        """As LightningCLI's; a constructor refusing its configured arguments is a user error."""
        with configuration_errors():
            super().instantiate_classes()

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
        console = make_console()
        ledger = getattr(self.datamodule, "ledger", None)
        if isinstance(ledger, StepLedger) and len(ledger):
            console.print(
                ledger_table(ledger, title=f"lightning-order {stage}: the ledger", pipeline=self.pipeline)
            )
            print_violations(console, self._ledger_violations(ledger))
        metrics = scalar_metrics(trainer.callback_metrics)
        print_metrics(console, metrics)
        self._summary_extras(console, stage, metrics)
        for label, where in locations(self.datamodule, trainer, stage):
            console.print(Text.assemble((f"{label}: ", "bold"), str(where)))

    #: The pipeline the summary judges and draws the ledger by.
    pipeline: Pipeline = STANDARD_PIPELINE

    def _ledger_violations(self, ledger: StepLedger) -> list[Any]:
        return check_ledger(ledger)

    def _summary_extras(self, console: Any, stage: str, metrics: dict[str, float]) -> None:
        """What a flavour of the CLI prints after the metrics (nothing here)."""


def _dims_set_by_user(model: Any, dims: Sequence[str]) -> list[tuple[str, str, Any]]:
    """``(prefix, dim, value)`` for each linked dim the model config sets to a non-default value."""
    if model is None:
        return []
    class_path = model.get("class_path") if hasattr(model, "get") else None
    init_args = model.get("init_args") if class_path else model
    prefix = "model.init_args" if class_path else "model"
    if init_args is None:
        return []
    defaults: dict[str, Any] = {}
    if class_path:
        try:
            model_class = import_object(class_path)
            params = inspect.signature(model_class.__init__).parameters
            defaults = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}
        except (ImportError, AttributeError, ValueError, TypeError):
            defaults = {}
    found = []
    for dim in dims:
        value = init_args.get(dim)
        if value is not None and value != defaults.get(dim):
            found.append((prefix, dim, value))
    return found


def order_callbacks(order: Namespace | dict[str, Any], existing: Iterable[Callback] = ()) -> list[Callback]:
    """The order callbacks to add, from the ``order:`` config group.

    A callback of a kind the user already configured is not added twice.

    Args:
        order: ``validate`` (bool), ``on_violation`` (``raise``/``warn``), ``planned_hours``,
            ``gpu_hour_price`` and ``overlap_threshold`` (OrderValidator's), ``symptoms`` (bool).
        existing: the callbacks already configured.

    Returns:
        ``[OrderValidator(...)]`` and ``SymptomMonitor()``, each when asked for and not configured.
    """
    existing = list(existing)
    added: list[Callback] = []
    if order.get("validate", True) and not any(isinstance(cb, OrderValidator) for cb in existing):
        added.append(
            OrderValidator(
                on_violation=order.get("on_violation", "raise"),
                planned_hours=order.get("planned_hours"),
                gpu_hour_price=order.get("gpu_hour_price"),
                overlap_threshold=order.get("overlap_threshold", 0.01),
            )
        )
    if order.get("symptoms", True) and not any(isinstance(cb, SymptomMonitor) for cb in existing):
        added.append(SymptomMonitor())
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
        with configuration_errors():
            self.config_init = self.parser.instantiate_classes(config)
        self.datamodule = self.config_init["data"]
        self.model = None
        self.trainer = None  # type: ignore[assignment]
        with configuration_errors():
            self.datamodule.prepare_data()  # a no-op when the cache of this configuration is complete
        prepare_report(self.datamodule)


# -- the extra subcommands' parsers and entry points -----------------------------------------
def _run_cli(cli_class: type[OrderCLI], args: list[str] | None, **kwargs: Any) -> OrderCLI:
    parser_kwargs = {"exit_on_error": False, **kwargs.pop("parser_kwargs", {})}  # main() prints the error
    with warnings.catch_warnings():
        # We may hand LightningCLI the arguments after `prepare` (or a caller's list); its warning
        # about also seeing sys.argv is meant for scripts that pass both by mistake.
        warnings.filterwarnings("ignore", message=".*args parameter is intended to run from within Python.*")
        return cli_class(args=args, parser_kwargs=parser_kwargs, **kwargs)


def main(args: list[str] | None = None) -> int:
    """The ``lightning-order`` command.

    Args:
        args: the command line after the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 on success; ``audit`` returns 1 on violations and 2 on unreadable
        manifests; a user error is printed without a traceback (:func:`error_lines`) and returns
        1 (the run was refused) or 2 (the command line was rejected).
    """
    argv = list(sys.argv[1:] if args is None else args)
    command = argv[0] if argv else None
    known = (*TOOLS, "fit", "validate", "test", "predict")
    prog = f"lightning-order {command}" if command in known else "lightning-order"
    try:
        if command == "audit":
            return _audit_main(argv[1:])
        if command == "graph":
            return _graph_main(argv[1:])
        if command == "prepare":
            parser_kwargs = {"prog": "lightning-order prepare", "description": TOOLS["prepare"]}
            _run_cli(_lm_cli(argv, True) or _PrepareCLI, argv[1:], run=False, parser_kwargs=parser_kwargs)
            return 0
        # args=None lets LightningCLI read sys.argv itself, which Lightning's DDP launcher re-runs.
        try:
            _run_cli(_lm_cli(argv) or OrderCLI, args, parser_kwargs={"prog": "lightning-order"})
        finally:
            release_process_group()
    except ArgumentError as err:
        print_error(error_lines(err, prog))
        return EXIT_USAGE
    except LightningOrderError as err:
        print_error(error_lines(err))
        return EXIT_REFUSED
    return 0


def _lm_cli(argv: list[str], prepare: bool = False) -> type[OrderCLI] | None:
    from lightning_order.cli.lm import cli_class_for  # an OrderedCausalLM model: the LM flavour

    return cli_class_for(argv, prepare)


if __name__ == "__main__":
    sys.exit(main())
