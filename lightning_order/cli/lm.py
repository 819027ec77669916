"""``lightning-order fit`` for causal language models: the LM flavour of :class:`~lightning_order.cli.OrderCLI`.

:func:`~lightning_order.cli.main` picks :class:`OrderLMCLI` when the model of the command line
or of a ``--config`` file is an :class:`~lightning_order.OrderedCausalLM` (or a subclass), so
``lightning-order fit --config configs/lm-demo.yaml`` needs no other command. It links
``vocab_size``, ``padded_vocab_size`` and ``block_size`` from
:class:`~lightning_order.OrderedLMDataModule` into the model at instantiation, adds the same
order callbacks (the validator judges the datamodule's :data:`~lightning_order.LM_PIPELINE`),
and ends a run with the ledger, the validation perplexity and a sampled continuation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import yaml
from rich.text import Text

from lightning_order.checks.ledger import check_ledger
from lightning_order.checks.lm import check_lm_records
from lightning_order.cli.lightning import OrderCLI, _PrepareCLI
from lightning_order.ledger import StepLedger
from lightning_order.order import LM_PIPELINE

__all__ = ["OrderLMCLI", "cli_class_for", "lm_ledger_violations", "sample_continuation"]

_LM_MODEL = "OrderedCausalLM"


class OrderLMCLI(OrderCLI):
    """:class:`~lightning_order.cli.OrderCLI` for ``OrderedCausalLM`` on ``OrderedLMDataModule``.

    Args:
        model_class: the model class (default ``OrderedCausalLM``); its constructor must take
            ``vocab_size``, ``padded_vocab_size`` and ``block_size``.
        datamodule_class: the datamodule class (default ``OrderedLMDataModule``).
        **kwargs: as :class:`~lightning_order.cli.OrderCLI`.
    """

    DIMS: tuple[str, ...] = ("vocab_size", "padded_vocab_size", "block_size")

    def __init__(self, model_class: Any = None, datamodule_class: Any = None, **kwargs: Any) -> None:
        if model_class is None:
            from lightning_order.models.causal_lm import OrderedCausalLM

            model_class = OrderedCausalLM
        if datamodule_class is None:
            from lightning_order.data.lm.datamodule import OrderedLMDataModule

            datamodule_class = OrderedLMDataModule
        super().__init__(model_class, datamodule_class, **kwargs)

    def add_arguments_to_parser(self, parser: Any) -> None:
        """The ``order:`` group and the dims links of :class:`OrderCLI`, plus ``torch_num_threads``."""
        super().add_arguments_to_parser(parser)
        parser.add_argument(
            "--torch_num_threads",
            type=int | None,
            default=None,
            help="torch.set_num_threads before anything is built (None: torch's default). A small model on "
            "a shared CPU trains in about half the CPU time on one thread.",
        )

    def before_instantiate_classes(self) -> None:
        """Applies ``torch_num_threads``."""
        config = self.config.get(str(self.subcommand), self.config) if self.subcommand else self.config
        threads = config.get("torch_num_threads")
        if threads:
            torch.set_num_threads(int(threads))

    pipeline = LM_PIPELINE

    def _ledger_violations(self, ledger: StepLedger) -> list[Any]:
        return lm_ledger_violations(ledger)

    def _summary_extras(self, console: Any, stage: str, metrics: dict[str, float]) -> None:
        """Validation perplexity and, after ``fit``, a sampled continuation."""
        ppl = metrics.get("val_ppl", math.exp(metrics["val_loss"]) if "val_loss" in metrics else None)
        if ppl is not None:
            console.print(Text.assemble(("validation perplexity: ", "bold"), f"{ppl:.2f}"))
        if stage == "fit" and self.model is not None:
            prompt, continuation = sample_continuation(self.model, self.datamodule)
            if prompt is not None:
                console.print(Text("sampled continuation (prompt, then the model's text):", style="bold"))
                console.print(Text.assemble((prompt, "cyan"), continuation))


class _LMPrepareCLI(_PrepareCLI, OrderLMCLI):
    """``lightning-order prepare`` on an LM config: the datamodule alone, prepared."""


def lm_ledger_violations(ledger: StepLedger) -> list[Any]:
    """The violations of an LM ledger: :data:`LM_PIPELINE`'s order and the ledger's LM checks."""
    return [*check_ledger(ledger, LM_PIPELINE), *check_lm_records(ledger)]


def sample_continuation(
    model: Any, datamodule: Any, prompt_words: int = 6, new_tokens: int = 60
) -> tuple[Any, str]:
    """The first words of a validation document and the model's sampled continuation of them (seeded).

    The document is the first of the validation split whose first line has at least
    ``prompt_words`` words (a sentence rather than a title), so the prompt ends on a word boundary.

    Returns:
        ``(prompt text, continuation text)``, or ``(None, "")`` when the datamodule has no
        tokenizer or documents.
    """
    try:
        tokenizer, eos = datamodule.tokenizer, int(datamodule.eos_token_id)
        documents = datamodule.documents("val")
    except (AttributeError, IndexError, KeyError, TypeError):
        return None, ""
    lines = [doc.split("\n", 1)[0].split() for doc in documents]
    words = next((line for line in lines if len(line) >= prompt_words), lines[0] if lines else [])
    if not words:
        return None, ""
    prompt = " ".join(words[:prompt_words])
    new = model.generate([eos, *tokenizer.encode(prompt).ids], new_tokens, eos_token_id=eos, seed=0)
    ended = bool(new) and new[-1] == eos
    text = tokenizer.decode([t for t in new if t != eos])
    return prompt, text + (" <|endoftext|>" if ended else " …")


def _config_paths(argv: Sequence[str]) -> list[str]:
    paths = []
    for i, arg in enumerate(argv):
        if arg in ("--config", "-c") and i + 1 < len(argv):
            paths.append(argv[i + 1])
        elif arg.startswith("--config="):
            paths.append(arg.split("=", 1)[1])
    return paths


def _model_class_path(argv: Sequence[str]) -> str | None:
    found = None
    for path in _config_paths(argv):
        try:
            config = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue  # LightningCLI reports an unreadable config itself
        model = config.get("model") if isinstance(config, dict) else None
        if isinstance(model, dict) and isinstance(model.get("class_path"), str):
            found = model["class_path"]
        elif isinstance(model, str):
            found = model
    for i, arg in enumerate(argv):
        if arg in ("--model", "--model.class_path") and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(("--model=", "--model.class_path=")):
            found = arg.split("=", 1)[1]
    return found


def cli_class_for(argv: Sequence[str], prepare: bool = False) -> type[OrderCLI] | None:
    """:class:`OrderLMCLI` (or its ``prepare`` flavour) when the command's model is an ``OrderedCausalLM``.

    Args:
        argv: the command line after the subcommand's name is fine too (``--config`` files and
            ``--model`` options are read).
        prepare: the class for ``lightning-order prepare``.

    Returns:
        The LM CLI class, or ``None`` for any other model (the classification CLI).
    """
    class_path = _model_class_path(argv)
    if not class_path:
        return None
    if class_path.rsplit(".", 1)[-1] != _LM_MODEL:
        try:
            from jsonargparse.typing import import_object

            from lightning_order.models.causal_lm import OrderedCausalLM

            if not issubclass(import_object(class_path), OrderedCausalLM):
                return None
        except (ImportError, AttributeError, ValueError, TypeError):
            return None
    return _LMPrepareCLI if prepare else OrderLMCLI
