"""``OrderCLI``: the one LightningCLI of every pipeline, configured by the pipeline's spec.

``fit``/``validate``/``test``/``predict`` are LightningCLI's own. :class:`OrderCLI` adds, for the
pipeline its spec names (:mod:`lightning_order.pipelines`):

* the data's dims (the spec's ``dims``) linked into the model with
  ``apply_on="instantiate"``: the datamodule is built (and its data prepared, or read from the
  cache) before the model, so ``init-before-data`` cannot happen from a config; a dim set in the
  model's config is refused;
* ``OrderValidator`` and ``SymptomMonitor`` appended to the trainer's callbacks, switched by the
  ``order:`` config group, next to any callbacks the user configures;
* ``torch_num_threads``, applied before anything is built;
* a strict command line: options matched by their full name only, a rejected one answered with
  the nearest valid option (:mod:`.parsing`); each subcommand's ``--help`` says how to see the
  other pipelines' options;
* one validation pass after a fit that ended before its first scheduled validation, so the
  summary has a validation figure;
* an end-of-run summary on rank 0: the ledger as a table with its verdict (the spec's
  checks), the final metrics, what the spec prints after them (an LM's perplexity and a
  sampled continuation), after a fit the train tokens per second (LM pipelines) and the loss
  curve written beside the logs (:mod:`.run_record`), and the folders that exist.

:func:`run` is what the ``lightning-order`` dispatcher (:mod:`.dispatch`) calls; it parses the
command line once, with jsonargparse, from the DataModule's and the model's typed signatures.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from argparse import ArgumentError
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import torch
from jsonargparse import Namespace
from jsonargparse.typing import import_object
from pytorch_lightning import Callback, LightningModule, Trainer
from pytorch_lightning.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from rich.text import Text

from lightning_order.callbacks import OrderValidator, SymptomMonitor
from lightning_order.cli.console import (
    configuration_errors,
    ledger_table,
    locations,
    never_validated,
    prepare_report,
    print_metrics,
    print_violations,
    scalar_metrics,
)
from lightning_order.cli.console import console as make_console
from lightning_order.cli.help import LIGHTNING_COMMANDS, TOOLS, pipeline_help
from lightning_order.cli.parsing import STRICT_PARSER, parser_options, with_suggestions
from lightning_order.cli.run_record import RunRecord, fit_figures
from lightning_order.cli.tools import tool_parser
from lightning_order.distributed import release_process_group
from lightning_order.ledger import StepLedger
from lightning_order.parallelism import mesh_misfit
from lightning_order.pipelines import PIPELINES, spec_for
from lightning_order.spec import PipelineSpec

__all__ = ["OrderCLI", "PrepareCLI", "order_callbacks", "run"]


class _SubcommandsParser(LightningArgumentParser):
    """LightningCLI's parser, keeping the subcommands action its :meth:`add_subcommands` returns.

    LightningCLI adds ``fit``/``validate``/... through that public method; keeping what it returns
    lets :class:`OrderCLI` list its tools beside them and find a subcommand's parser (the action's
    ``choices``) without reading jsonargparse's or LightningCLI's private attributes.
    """

    subcommands_action: Any = None

    def add_subcommands(self, *args: Any, **kwargs: Any) -> Any:
        """As jsonargparse's; the action is kept as :attr:`subcommands_action`."""
        self.subcommands_action = super().add_subcommands(*args, **kwargs)
        return self.subcommands_action


class _CredentialFreeConfig(SaveConfigCallback):
    """LightningCLI's ``config.yaml`` in the log folder, with every ``storage_options`` left out.

    ``storage_options`` holds credentials (an object store's key and secret), which are never
    written; a run read again from this file gets the environment's (``AWS_*``) instead.
    """

    def __init__(self, parser: LightningArgumentParser, config: Namespace, *args: Any, **kwargs: Any) -> None:
        config = config.clone()
        for key in config.keys():
            if key.rsplit(".", 1)[-1] == "storage_options" and config[key] is not None:
                config[key] = None
        super().__init__(parser, config, *args, **kwargs)


class OrderCLI(LightningCLI):
    """LightningCLI for ordered data: dims linked at instantiation, order checks on by default.

    The pipeline (its DataModule, its model, the dims linked between them, its ledger checks and
    summary) comes from a spec of :mod:`lightning_order.pipelines`: the one named by
    ``pipeline``, else the one the given classes belong to, else ``"standard"``
    (``OrderedDataModule`` and ``OrderedTextClassifier``). Any ``LightningModule`` whose
    constructor takes the dims can replace the model with ``--model.class_path``.

    Examples:
        A training script of one's own, with one's own model::

            from lightning_order.cli import OrderCLI
            OrderCLI(model_class=MyModel, subclass_mode_model=False)

    Args:
        model_class: the model class (default: the spec's); its constructor must take the
            spec's dims.
        datamodule_class: the datamodule class (default: the spec's); it must expose the
            dims as attributes (reading them prepares the data).
        pipeline: the spec, or its name (``"standard"``, ``"lm"``).
        subclass_mode_model: whether ``model:`` is given as ``class_path``/``init_args`` (so any
            subclass of ``model_class`` can be chosen from the config).
        save_config_kwargs: passed to LightningCLI; ``overwrite`` defaults to ``True`` here so
            that re-running a config in the same folder does not fail.
        **kwargs: anything else ``LightningCLI`` takes (``args``, ``run``, ``trainer_defaults``...).
    """

    #: The name of the spec a subclass is bound to (``None``: chosen from the classes).
    pipeline_name: str | None = None

    def __init__(
        self,
        model_class: Any = None,
        datamodule_class: Any = None,
        *,
        pipeline: PipelineSpec | str | None = None,
        subclass_mode_model: bool = True,
        save_config_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = pipeline.name if isinstance(pipeline, PipelineSpec) else pipeline or self.pipeline_name
        classes = [c for c in (datamodule_class, model_class) if isinstance(c, type)]
        self.spec = spec_for(name=name, classes=classes)
        kwargs.setdefault("parser_class", _SubcommandsParser)
        kwargs.setdefault("save_config_callback", _CredentialFreeConfig)
        #: The model a config that names none gets (the spec's, unless one was given).
        self.default_model_class = model_class or self.spec.model_class()
        # In subclass mode `model.class_path` may name any LightningModule whose constructor takes
        # the dims (a transformers wrapper), not only subclasses of the pipeline's own model.
        base = LightningModule if subclass_mode_model and model_class is None else self.default_model_class
        super().__init__(
            base,
            datamodule_class or self.spec.datamodule_class(),
            subclass_mode_model=subclass_mode_model,
            save_config_kwargs={"overwrite": True, **(save_config_kwargs or {})},
            **kwargs,
        )

    @property
    def dims(self) -> tuple[str, ...]:
        """The dims linked from the datamodule into the model (the spec's)."""
        return self.spec.dims

    # -- parser ----------------------------------------------------------------------------
    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """LightningCLI's parser, strict: an option is matched by its full name only (no prefix)."""
        return super().init_parser(**{**STRICT_PARSER, **kwargs})

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Adds the ``order:`` group and ``torch_num_threads``, and links the data's dims into the model."""
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
        parser.add_argument(
            "--torch_num_threads",
            type=int | None,
            default=None,
            help="torch.set_num_threads before anything is built (None: torch's default). A small model on "
            "a shared CPU trains in about half the CPU time on one thread.",
        )
        if self.subclass_mode_model:
            model_class = self.default_model_class
            parser.set_defaults(
                {"model": {"class_path": f"{model_class.__module__}.{model_class.__qualname__}"}}
            )
        prefix = "model.init_args" if self.subclass_mode_model else "model"
        for dim in self.dims:
            # Read off the *instantiated* datamodule: the model is built after the data is known.
            parser.link_arguments(f"data.{dim}", f"{prefix}.{dim}", apply_on="instantiate")

    def setup_parser(
        self, add_subcommands: bool, main_kwargs: dict[str, Any], subparser_kwargs: dict[str, Any]
    ) -> None:
        """LightningCLI's parser, with ``prepare``, ``audit`` and ``graph`` listed in ``--help``."""
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        subcommands = getattr(self.parser, "subcommands_action", None)  # None: a caller's parser_class
        if add_subcommands and subcommands is not None:
            # The dispatcher runs these before LightningCLI parses; registering them here is what
            # makes LightningCLI's own `--help` list them next to fit/validate/test/predict.
            for name, help_text in TOOLS.items():
                subcommands.add_subcommand(name, tool_parser(name), help=help_text)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parses as LightningCLI does; a dim set in the model's config and our own subcommands are refused.

        A rejected option is answered with the nearest valid one (``did you mean ...?``).
        """
        try:
            super().parse_arguments(parser, args)
        except ArgumentError as err:
            given = [] if isinstance(args, (dict, Namespace)) else sys.argv[1:] if args is None else args
            argv = [str(a) for a in given]
            subcommand = next((a for a in argv if a in self.subcommands()), None)
            subcommands = getattr(parser, "subcommands_action", None)
            subparsers = subcommands.choices if subcommands is not None else {}
            options = parser_options(subparsers.get(subcommand, parser))
            raise with_suggestions(err, options, argv) from err
        subcommand = self.config.get("subcommand")
        config = self.config.get(subcommand, self.config) if subcommand else self.config
        overridden = _dims_set_by_user(config.get("model"), self.dims)
        if overridden:
            shown = ", ".join(f"{prefix}.{dim}={value}" for prefix, dim, value in overridden)
            parser.error(
                f"{shown}: the model's dims come from the data (data.<dim> is linked into the model when "
                "it is built, so a value here would be silently replaced); remove it, and change the "
                f"data instead (e.g. --data.{overridden[0][1]}) or pass another --model.class_path"
            )
        misfit = _mesh_misfit(config.get("trainer"))
        if misfit:  # else Lightning starts every process first, and each one fails with a traceback
            parser.error(misfit)
        if subcommand in TOOLS:
            parser.error(
                f"'{subcommand}' is run by the `lightning-order` command (lightning_order.cli.main), "
                f"not by OrderCLI: call main(['{subcommand}', ...])"
            )

    def before_instantiate_classes(self) -> None:
        """Applies ``torch_num_threads``."""
        config = self.config.get(str(self.subcommand), self.config) if self.subcommand else self.config
        threads = config.get("torch_num_threads")
        if threads:
            torch.set_num_threads(int(threads))

    def instantiate_classes(self) -> None:
        """As LightningCLI's; a constructor refusing its configured arguments is a user error."""
        with configuration_errors():
            super().instantiate_classes()

    # -- trainer ---------------------------------------------------------------------------
    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """Builds the trainer with the order callbacks and a :class:`RunRecord` appended to the configured ones."""
        config = self.config_init.get(str(self.subcommand), self.config_init)
        order = self.config.get(str(self.subcommand), self.config).get("order")
        trainer_config = config.get("trainer")
        if trainer_config is not None:
            callbacks = trainer_config.get("callbacks") or []
            if not isinstance(callbacks, list):
                callbacks = [callbacks]
            added = order_callbacks(order, callbacks) if order is not None else []
            # The summary's throughput and loss curve (tokens counted for LM pipelines only).
            self.run_record = RunRecord(count_tokens=self.spec.token_checks)
            trainer_config["callbacks"] = [*callbacks, *added, self.run_record]
        return super().instantiate_trainer(**kwargs)

    # -- end-of-run summaries --------------------------------------------------------------
    def after_fit(self) -> None:
        """Validates once if the run stopped before any validation, then prints the summary (rank 0)."""
        self._validate_if_never_validated()
        self._summary("fit")

    def _validate_if_never_validated(self) -> None:
        """One validation pass after a fit that ended before its first scheduled validation.

        A run cut short (``--trainer.max_steps 20`` on a config that validates every 4 epochs)
        otherwise ends without any validation figure (an LM's perplexity). Every rank calls it
        (the pass is collective); the fit's own metrics stay in the summary.
        """
        trainer = self.trainer
        if trainer is None or self.model is None or not never_validated(trainer, self.datamodule):
            return
        self._fit_metrics = scalar_metrics(trainer.callback_metrics)
        trainer.validate(self.model, datamodule=self.datamodule, verbose=False)

    def after_validate(self) -> None:
        """Prints the summary of the run (rank 0)."""
        self._summary("validate")

    def after_test(self) -> None:
        """Prints the summary of the run (rank 0)."""
        self._summary("test")

    def _summary(self, stage: str) -> None:
        trainer = self.trainer
        # trainer.log_dir is a broadcast from rank 0 under DDP: every rank asks, before rank 0 alone prints.
        log_dir = trainer.log_dir if trainer is not None and stage == "fit" else None
        if trainer is None or not trainer.is_global_zero:
            return
        console = make_console()
        ledger = getattr(self.datamodule, "ledger", None)
        if isinstance(ledger, StepLedger) and len(ledger):
            judged = spec_for(ledger=ledger) if ledger.info.get("pipeline") else self.spec
            title = f"lightning-order {stage}: the ledger"
            console.print(ledger_table(ledger, title=title, pipeline=judged.pipeline))
            print_violations(console, judged.check(ledger))
        metrics = {**getattr(self, "_fit_metrics", {}), **scalar_metrics(trainer.callback_metrics)}
        print_metrics(console, metrics)
        printer = self.spec.summary_printer()
        if printer is not None:
            printer(console, self.datamodule, self.model, stage, metrics)
        record = getattr(self, "run_record", None)
        if stage == "fit" and isinstance(record, RunRecord):
            for label, text in fit_figures(record, log_dir, trainer.world_size):
                console.print(Text.assemble((f"{label}: ", "bold"), text))
        for label, where in locations(self.datamodule, trainer, stage):
            console.print(Text.assemble((f"{label}: ", "bold"), str(where)))


class PrepareCLI(OrderCLI):
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


def _mesh_misfit(trainer: Any) -> str | None:
    """:func:`~lightning_order.parallelism.mesh_misfit` of a parsed ``trainer`` section with a ``ModelParallelStrategy``."""
    strategy = trainer.get("strategy") if isinstance(trainer, (Namespace, dict)) else None
    if not isinstance(strategy, (Namespace, dict)) or not str(strategy.get("class_path", "")).endswith(
        "ModelParallelStrategy"
    ):
        return None
    sizes = strategy.get("init_args") or {}
    return mesh_misfit(
        sizes.get("data_parallel_size", "auto"),
        sizes.get("tensor_parallel_size", "auto"),
        trainer.get("devices"),
        trainer.get("num_nodes", 1),
    )


def _public_model(spec: PipelineSpec) -> str:
    """The model's public import path (``lightning_order.OrderedCausalLM``), as a config names it."""
    return f"lightning_order.{spec.model.partition(':')[2]}"


def run(args: list[str] | None, spec: PipelineSpec, *, prepare: bool = False, prog: str) -> None:
    """Runs :class:`OrderCLI` (or :class:`PrepareCLI`) for ``spec`` on ``args``.

    ``args=None`` lets LightningCLI read ``sys.argv`` itself, which Lightning's DDP launcher re-runs.
    Errors propagate (the dispatcher prints them as one line each).
    """
    cli_class = PrepareCLI if prepare else OrderCLI
    parser_kwargs: dict[str, Any] = {"exit_on_error": False, "prog": prog}  # the dispatcher prints the error
    if prepare:
        parser_kwargs["description"] = TOOLS["prepare"]
    else:
        models = {name: (d.title, _public_model(d)) for name, d in PIPELINES.items()}
        shown, others = models.pop(spec.name), models
        for command in LIGHTNING_COMMANDS:  # each subcommand's --help says how to see the other pipelines'
            parser_kwargs[command] = {"description": pipeline_help(command, shown, others)}
    with warnings.catch_warnings():
        # We may hand LightningCLI the arguments after `prepare` (or a caller's list); its warning
        # about also seeing sys.argv is meant for scripts that pass both by mistake.
        warnings.filterwarnings("ignore", message=".*args parameter is intended to run from within Python.*")
        try:
            cli_class(args=args, parser_kwargs=parser_kwargs, pipeline=spec, run=not prepare)
        finally:
            release_process_group()
