"""The step-1 observer: what the model really receives and is trained against in the first step.

Installed at the first training batch (``on_train_batch_start``, batch 0 at global step 0) and
removed when step 1 is judged (``on_before_optimizer_step``, or ``on_train_batch_end`` of the
first micro-batch) or the run ends: forward pre-hooks on the token embedding(s) (the module
``get_input_embeddings()`` returns, for every ``transformers`` model found by walking the
LightningModule's modules, a compiled or nested one included; else every ``nn.Embedding`` the
ids reach) and, with keyword arguments, on the top ``transformers`` model(s) (``position_ids``,
``attention_mask``, ``cu_seq_lens_q``, whether ``labels=`` was passed); and
``torch.nn.functional.cross_entropy`` wrapped, which ``nn.CrossEntropyLoss`` and ``transformers``'
``ForCausalLMLoss`` call too. Each records detached CPU copies of the first :data:`MAX_ROWS` rows
and :data:`MAX_TOKENS` positions only (a few hundred KiB), and nothing else: the step computes
exactly what it would have computed without the observer (no random number drawn, no tensor
written, the same call with the same arguments).

Trade-off: a loss computed by another function (``nll_loss`` on log-probabilities, a fused
kernel), or bound to a name before the wrap (``from torch.nn.functional import cross_entropy``),
is not seen; then the ``labels=`` a ``transformers`` causal LM got stand for the targets it shifts
itself, and failing that the rules fall back to the sampled batches, which only warn. Hooks
added to a module inside a compiled graph do not fire: the top model's keyword arguments give the
ids then. Gathering only: :func:`~lightning_order.checks.step_one.judge_step_one` judges.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from lightning_order.checks.label_shift import IGNORE_INDEX
from lightning_order.checks.step_one import LossSeen, StepOne, TokenFacts
from lightning_order.rules import Violation

__all__ = ["MAX_LOSSES", "MAX_ROWS", "MAX_TOKENS", "StepOneObserver", "StepOneWatch", "hf_models"]

log = logging.getLogger(__name__)

#: Rows of each tensor copied (enough document starts for the BOS rule: one a padded row).
MAX_ROWS = 16
#: Positions of each row copied.
MAX_TOKENS = 2048
#: Losses recorded at most (a step may compute a few: an auxiliary loss, a teacher's).
MAX_LOSSES = 4
#: Keyword arguments of the model call whose first rows and positions are kept.
_KWARGS = ("position_ids", "attention_mask")


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's tensor: a ``DTensor`` (FSDP2, tensor parallelism) as its local shard, no collective."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _slice(tensor: torch.Tensor) -> np.ndarray:
    copied: np.ndarray = _local(tensor.detach())[:MAX_ROWS, :MAX_TOKENS].cpu().numpy()
    return copied


def _is_ids(value: Any) -> TypeGuard[torch.Tensor]:
    return torch.is_tensor(value) and value.ndim == 2 and not value.is_floating_point() and value.numel() > 0


def _rows(table: nn.Module) -> int | None:
    """The rows of a token embedding: ``num_embeddings`` (the whole table, also where a tensor-parallel
    rank holds a slice of its weight), else its weight's first dimension."""
    rows = getattr(table, "num_embeddings", None)
    if isinstance(rows, int) and rows > 0:
        return rows
    weight = getattr(table, "weight", None)
    return int(weight.shape[0]) if weight is not None and weight.ndim == 2 and weight.shape[0] else None


def _is_hf_model(module: nn.Module) -> bool:
    """A ``transformers`` model (or a compiled one, whose attributes are its original's)."""
    return callable(getattr(module, "get_input_embeddings", None)) and hasattr(module, "config")


def hf_models(module: nn.Module) -> list[nn.Module]:
    """The top ``transformers`` models inside ``module``: none of them inside another."""
    found: list[tuple[str, nn.Module]] = []
    for name, sub in module.named_modules():
        if any(name == top or name.startswith(top + ".") for top, _ in found if top):
            continue
        if _is_hf_model(sub):
            found.append((name, sub))
    return [sub for _, sub in found]


@dataclass
class StepOneWatch:
    """What the callback keeps between ``on_fit_start`` and the judgement of step 1.

    Attributes:
        sampled: violations read from sampled batches only: warned unless step 1 decides their rule.
        facts: the tokenizer's and the records' facts for the step-1 rules.
        observer: the hooks, while installed.
        judged: step 1 was judged (nothing is installed again in this fit).
    """

    sampled: list[Violation] = field(default_factory=list)
    facts: TokenFacts = field(default_factory=TokenFacts)
    observer: StepOneObserver | None = None
    judged: bool = False


class StepOneObserver:
    """Hooks that record what ``module`` receives and is trained against until :meth:`remove`.

    Args:
        module: the LightningModule (or model) of the run.
        on_overflow: called with what was seen when an id beyond the token embedding enters it,
            before the embedding fails on it (the callback raises its report there).
    """

    def __init__(self, module: nn.Module, on_overflow: Callable[[StepOne], None] | None = None) -> None:
        self.module, self.on_overflow = module, on_overflow
        self._handles: list[Any] = []
        self._original: Callable[..., torch.Tensor] | None = None
        self._wrapper: Callable[..., torch.Tensor] | None = None
        self.active = False
        self.ids: np.ndarray | None = None
        self.shape: tuple[int, ...] | None = None
        self.max_id: int | None = None
        self.embedding_rows: int | None = None
        self.losses: list[LossSeen] = []
        # Flat targets of per-token losses (reduction="none"): pieces of one loss until read together.
        self._pieces: list[torch.Tensor] = []
        self._pieces_ignore = IGNORE_INDEX
        self.call: dict[str, Any] = {}

    # -- installing and removing -------------------------------------------------------------
    def install(self) -> None:
        """Registers the hooks and wraps ``cross_entropy`` (once; :meth:`remove` undoes both)."""
        if self.active:
            return
        models = hf_models(self.module)
        embeddings: dict[int, nn.Module] = {}
        for model in models:
            try:
                table = model.get_input_embeddings()
            except (NotImplementedError, AttributeError):  # a model without one: its call still tells
                table = None
            if isinstance(table, nn.Module):
                embeddings[id(table)] = table
            self._handles.append(
                model.register_forward_pre_hook(self._model_call(type(model).__name__), with_kwargs=True)
            )
        if not models:  # a hand-written model: every embedding the ids reach (positions come 1-D)
            embeddings = {id(m): m for m in self.module.modules() if isinstance(m, nn.Embedding)}
        for table in embeddings.values():
            self._handles.append(table.register_forward_pre_hook(self._embedding_input(table)))
        self._original = original = functional.cross_entropy

        def cross_entropy(
            input: torch.Tensor, target: torch.Tensor, *args: Any, **kwargs: Any
        ) -> torch.Tensor:
            # Inside a graph being compiled a copy would break the graph: the model's labels= stand in.
            if self.active and not torch.compiler.is_compiling():
                ignore = kwargs.get("ignore_index", args[2] if len(args) > 2 else IGNORE_INDEX)
                reduction = kwargs.get("reduction", args[4] if len(args) > 4 else "mean")
                if reduction == "none" and target.ndim == 1 and not target.is_floating_point():
                    # litgpt's chunked_cross_entropy: the flat targets cut into pieces of 128 (#48).
                    self._pieces.append(target.detach())
                    self._pieces_ignore = int(ignore)
                else:
                    self._record_loss(target, int(ignore))
            return original(input, target, *args, **kwargs)

        self._wrapper = cross_entropy
        functional.cross_entropy = cross_entropy  # restored by remove()
        self.active = True

    def remove(self) -> None:
        """Removes every hook and restores ``cross_entropy`` (idempotent; safe after an exception)."""
        self.active = False
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._original is not None and functional.cross_entropy is self._wrapper:
            functional.cross_entropy = self._original
        self._original = self._wrapper = None

    # -- recording -----------------------------------------------------------------------------
    def _embedding_input(self, table: nn.Module) -> Callable[..., None]:
        def hook(_module: nn.Module, args: tuple[Any, ...]) -> None:
            if not self.active or self.ids is not None or not args or not _is_ids(args[0]):
                return
            if torch.compiler.is_compiling():  # the top model's keyword arguments give the ids
                return
            self._record_ids(args[0], _rows(table))

        return hook

    def _record_ids(self, ids: torch.Tensor, rows: int | None) -> None:
        self.ids, self.shape = _slice(ids), tuple(ids.shape)
        self.max_id, self.embedding_rows = int(_local(ids.detach()).max()), rows
        if rows is not None and self.max_id >= rows and self.on_overflow is not None:
            # The embedding fails on it next (a device-side assert on GPU): the report comes first.
            self.on_overflow(self.observation())

    def _model_call(self, name: str) -> Callable[..., None]:
        def hook(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if not self.active or self.call or torch.compiler.is_compiling():
                return  # compiled whole with the LightningModule: nothing seen, the samples only warn
            ids = kwargs.get("input_ids", args[0] if args else None)
            labels = kwargs.get("labels")
            self.call = {
                "model": name,
                "ids": (_slice(ids), tuple(ids.shape), int(_local(ids.detach()).max())) if _is_ids(ids) else None,
                "labels": _slice(labels) if _is_ids(labels) else None,
                "labels_shape": tuple(labels.shape) if _is_ids(labels) else None,
                "labels_empty": int((labels == IGNORE_INDEX)[:, 1:].all(dim=1).sum()) if _is_ids(labels) else 0,
                "cu_seq_lens": kwargs.get("cu_seq_lens_q") is not None,
                **{k: _slice(kwargs[k]) if torch.is_tensor(kwargs.get(k)) and kwargs[k].ndim == 2 else None
                   for k in _KWARGS},
            }  # fmt: skip

        return hook

    def _join_pieces(self) -> None:
        """The pieces of flat targets recorded so far, recorded as the one loss they make."""
        pieces, self._pieces = self._pieces, []
        if pieces:
            self._record_loss(torch.cat(pieces), self._pieces_ignore)

    def _record_loss(self, target: torch.Tensor, ignore_index: int) -> None:
        self._join_pieces()  # a loss of another kind ends the pieces before it
        if len(self.losses) >= MAX_LOSSES or target.is_floating_point():
            return
        if (
            self.ids is None and self.call.get("ids") is not None
        ):  # a compiled model's embedding hook did not fire
            self.ids, self.shape, self.max_id = self.call["ids"]
        rows = self.shape[0] if self.shape else None
        flat = target.detach()
        if flat.ndim == 1 and rows and flat.numel() % rows == 0:
            grid = flat.view(rows, -1)
        elif flat.ndim == 2:
            grid = flat
        else:
            return  # one target per row (a classifier), or a layout not tied to the ids
        if grid.shape[1] < 2:
            return
        empty = int((grid == ignore_index).all(dim=1).sum())
        self.losses.append(LossSeen(_slice(grid), ignore_index, int(grid.shape[0]), empty, "cross_entropy"))

    # -- what was seen -------------------------------------------------------------------------
    def observation(self) -> StepOne:
        """What was recorded so far, as plain data for :func:`~lightning_order.checks.step_one.judge_step_one`."""
        self._join_pieces()
        call = self.call
        ids, shape, max_id = self.ids, self.shape, self.max_id
        if ids is None and call.get("ids") is not None:
            ids, shape, max_id = call["ids"]
        losses = list(self.losses)
        labels = call.get("labels")
        if not losses and labels is not None and shape is not None and labels.shape[0] <= shape[0]:
            # No loss seen (another function, a compiled graph): a transformers causal LM shifts the
            # labels= it got by one itself, the last position predicting nothing.
            shifted = np.full(labels.shape, IGNORE_INDEX, dtype=labels.dtype)
            shifted[:, :-1] = labels[:, 1:]
            rows = call["labels_shape"][0]
            source = f"{call['model']}(labels=...)"
            losses.append(LossSeen(shifted, IGNORE_INDEX, rows, call["labels_empty"], source))
        return StepOne(
            ids=ids,
            max_id=max_id,
            embedding_rows=self.embedding_rows,
            losses=tuple(losses),
            position_ids=call.get("position_ids"),
            attention_mask=call.get("attention_mask"),
            cu_seq_lens=bool(call.get("cu_seq_lens")),
            labels_to_model=labels is not None,
            model=call.get("model", type(self.module).__name__),
            call_seen=bool(call),
        )
