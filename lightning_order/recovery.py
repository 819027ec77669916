"""Pause a run that trains on wrongly ordered data, report what it cost, and recover its weights.

Three pieces:

* :func:`pause` writes an *emergency checkpoint*: everything ``trainer.save_checkpoint`` stores
  (weights, optimizer state, the step reached, callback states) plus a ``lightning_order`` entry
  with the ledger, the diagnoses or violations that caused the pause, the old vocabulary, and a
  :func:`waste_report`; then it stops every rank.
* :func:`remap_embedding` and :func:`reinit_mismatched` are the two repairs, as plain functions.
* :func:`recover` reads a paused checkpoint and returns a :class:`RecoveryPlan`: what
  ``trainer.fit`` needs next, and whether to continue from the recovered weights or restart.

Why warm-start instead of resuming: after a data-order error the prepared data changes (a new
vocabulary, new statistics), so the old token ids and the optimizer's moments refer to data that
no longer exists. Resuming the checkpoint as is would train on mismatched ids; starting from
scratch would throw away what the model learned. We keep every weight that still means the same
thing (same name, same shape), move embedding rows to their token's new id (a token's row is the
same vector whichever id it gets), give new tokens a fresh init, and rebuild the optimizer (its
moments belong to the old parameters' geometry). The schedule restarts; the weights do not.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

from lightning_order.checks.symptoms import Diagnosis
from lightning_order.ledger import CHECKPOINT_KEY

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pytorch_lightning as pl

    from lightning_order.order import Violation

__all__ = [
    "PAUSE_KEY",
    "RecoveryPlan",
    "pause",
    "recover",
    "reinit_mismatched",
    "remap_embedding",
    "waste_report",
]

#: The checkpoint key under which :func:`pause` stores its payload.
PAUSE_KEY = CHECKPOINT_KEY  # the pause shares the validator's checkpoint entry
_FORMAT = "lightning_order.pause"
_FORMAT_VERSION = 1

# Symptoms whose fix changes neither the prepared data nor the model: resume the checkpoint.
_RESUME_SYMPTOMS = {"data-starvation", "memory-swing"}
_INIT_RULES = {"init-before-data"}


# -- waste ------------------------------------------------------------------------------------
def waste_report(
    elapsed_s: float,
    num_devices: int = 1,
    *,
    step: int = 0,
    planned_steps: float | None = None,
    gpu_hour_price: float | None = None,
) -> dict[str, Any]:
    """What a run spent so far, in device-hours and (with a price) money.

    Args:
        elapsed_s: wall seconds the run trained.
        num_devices: devices it held (all nodes together).
        step: the global step reached.
        planned_steps: the steps the run was going to take (``trainer.estimated_stepping_batches``);
            ``None`` or infinite when unknown.
        gpu_hour_price: the price of one device-hour; ``cost`` is ``None`` without it.

    Returns:
        ``{"elapsed_s", "num_devices", "device_hours", "cost", "gpu_hour_price", "step",
        "planned_steps", "progress"}`` where ``progress`` is ``step / planned_steps`` (or ``None``).
    """
    if elapsed_s < 0 or num_devices < 1:
        raise ValueError(f"expected elapsed_s >= 0 and num_devices >= 1, got {elapsed_s}, {num_devices}")
    device_hours = elapsed_s * num_devices / 3600.0
    known = planned_steps is not None and math.isfinite(planned_steps) and planned_steps > 0
    return {
        "elapsed_s": float(elapsed_s),
        "num_devices": int(num_devices),
        "device_hours": device_hours,
        "cost": device_hours * gpu_hour_price if gpu_hour_price is not None else None,
        "gpu_hour_price": gpu_hour_price,
        "step": int(step),
        "planned_steps": float(planned_steps) if known else None,
        "progress": min(step / planned_steps, 1.0) if known else None,
    }


def _describe_waste(waste: Mapping[str, Any]) -> str:
    text = f"{waste['device_hours']:.3g} device-hours on {waste['num_devices']} device(s)"
    if waste.get("cost") is not None:
        text += f", cost {waste['cost']:.2f}"
    if waste.get("progress") is not None:
        text += f", {waste['progress']:.0%} of the planned {int(waste['planned_steps'])} steps"
    return text


# -- pause ------------------------------------------------------------------------------------
def pause(
    trainer: pl.Trainer,
    path: str | Path,
    *,
    reason: Iterable[Diagnosis | Violation] = (),
    gpu_hour_price: float | None = None,
    elapsed_s: float | None = None,
) -> Path:
    """Saves an emergency checkpoint and stops the run on every rank. Call it on all ranks.

    The checkpoint is a normal Lightning checkpoint (weights, optimizer and scheduler states, the
    step reached, callback states, so ``trainer.fit(..., ckpt_path=path)`` resumes it) with one
    more key, :data:`PAUSE_KEY`: the format, the reasons (diagnoses or violations as plain
    data), the datamodule's ledger, class and hyper-parameters, its vocabulary (token -> id),
    the model's class, and the :func:`waste_report`.

    Args:
        trainer: the running trainer.
        path: where to write the checkpoint.
        reason: the diagnoses (from :class:`~lightning_order.callbacks.SymptomMonitor`) or
            violations (from ``OrderValidator``) behind the pause.
        gpu_hour_price: the price of one device-hour, for the cost in the waste report.
        elapsed_s: seconds trained so far; default: a callback's ``elapsed_s`` (the monitor's), or 0.

    Returns:
        The checkpoint's path.
    """
    path = Path(path)
    if elapsed_s is None:
        elapsed_s = next((float(cb.elapsed_s) for cb in trainer.callbacks if hasattr(cb, "elapsed_s")), 0.0)
    payload = _payload(trainer, list(reason), gpu_hour_price, elapsed_s)
    # What Trainer.save_checkpoint does, with our entry added before the single write; every rank
    # takes part (a sharded strategy gathers here) and only global rank 0 writes.
    checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
    # Merge, so what OrderValidator.on_save_checkpoint put under the same key (the data's
    # fingerprints) survives the pause.
    checkpoint[PAUSE_KEY] = {**(checkpoint.get(PAUSE_KEY) or {}), **payload}
    trainer.strategy.save_checkpoint(checkpoint, path)
    trainer.strategy.barrier("lightning_order.pause")
    trainer.should_stop = True
    return path


def _qualname(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _payload(
    trainer: pl.Trainer, reason: list[Any], gpu_hour_price: float | None, elapsed_s: float
) -> dict[str, Any]:
    datamodule = trainer.datamodule
    ledger = getattr(datamodule, "ledger", None)
    tokenizer = getattr(datamodule, "tokenizer", None)
    vocab = tokenizer.get_vocab() if tokenizer is not None and hasattr(tokenizer, "get_vocab") else None
    planned = trainer.estimated_stepping_batches
    reasons = []
    for item in reason:
        kind = "diagnosis" if isinstance(item, Diagnosis) else "violation"
        reasons.append({"type": kind, **item.to_dict()})
    return {
        "format": _FORMAT,
        "format_version": _FORMAT_VERSION,
        "reason": reasons,
        "step": trainer.global_step,
        "epoch": trainer.current_epoch,
        "ledger": ledger.state_dict() if hasattr(ledger, "state_dict") else None,
        "vocab": dict(vocab) if vocab is not None else None,
        "datamodule": {
            "class": _qualname(datamodule) if datamodule is not None else None,
            "hparams": dict(getattr(datamodule, "hparams", {}) or {}),
        },
        "model": {"class": _qualname(trainer.lightning_module)},
        "waste": waste_report(
            elapsed_s,
            trainer.world_size,
            step=trainer.global_step,
            planned_steps=planned,
            gpu_hour_price=gpu_hour_price,
        ),
    }


# -- the two repairs --------------------------------------------------------------------------
def remap_embedding(
    old_weight: torch.Tensor,
    old_vocab: Mapping[str, int],
    new_vocab: Mapping[str, int],
    init: torch.Tensor | Callable[[torch.Tensor], Any] | None = None,
    num_embeddings: int | None = None,
) -> torch.Tensor:
    """Moves embedding rows from the old vocabulary's ids to the new one's, by token string.

    A token present in both vocabularies keeps its learned row, bit for bit, at its new id. Rows
    of tokens only in the new vocabulary come from ``init``.

    Args:
        old_weight: the old table, ``len(old vocab ids) x dim``.
        old_vocab: token -> id of the old vocabulary.
        new_vocab: token -> id of the new vocabulary.
        init: the rows for new tokens: a tensor of the new table's shape (e.g. a freshly built
            model's embedding), or a function that fills a tensor in place (e.g.
            ``torch.nn.init.normal_``, the default, like ``nn.Embedding``).
        num_embeddings: rows of the new table (default: the largest new id + 1).

    Returns:
        The new table (a new tensor, same dtype and device as ``old_weight``).
    """
    rows = num_embeddings if num_embeddings is not None else max(new_vocab.values(), default=-1) + 1
    if isinstance(init, torch.Tensor):
        if init.shape != (rows, old_weight.shape[1]):
            raise ValueError(
                f"init has shape {tuple(init.shape)}, expected ({rows}, {old_weight.shape[1]}) "
                "(new vocabulary size x embedding dim)"
            )
        new = init.detach().to(dtype=old_weight.dtype, device=old_weight.device).clone()
    else:
        new = torch.empty(rows, old_weight.shape[1], dtype=old_weight.dtype, device=old_weight.device)
        (init or nn.init.normal_)(new)
    pairs = [
        (new_id, old_vocab[token])
        for token, new_id in new_vocab.items()
        if token in old_vocab and new_id < rows and old_vocab[token] < old_weight.shape[0]
    ]
    if pairs:
        new_ids = torch.tensor([p[0] for p in pairs], device=new.device)
        old_ids = torch.tensor([p[1] for p in pairs], device=new.device)
        with torch.no_grad():
            new[new_ids] = old_weight.detach()[old_ids]
    return new


def _hparams(model: nn.Module) -> dict[str, Any]:
    return dict(getattr(model, "hparams", {}) or {})


def reinit_mismatched(
    model: nn.Module, dims: Mapping[str, Any], model_cls: type[nn.Module] | None = None
) -> list[str]:
    """Re-initialises, in place, only the layers whose shapes no longer match the data's dims.

    A reference model is built from the model's hyper-parameters with ``dims`` applied; each
    submodule owning a parameter whose shape differs from the reference's is replaced by the
    reference's (freshly initialised) submodule, then every parameter of it whose shape still
    matches gets its old value back. Everything else is untouched. The optimizer must be rebuilt
    (``trainer.fit`` calls ``configure_optimizers`` again); ``model.hparams`` take the new dims.

    Args:
        model: the model built before the data (e.g. with a default ``vocab_size``).
        dims: the data's dims (``datamodule.dims``).
        model_cls: the class to build the reference with (default: ``type(model)``).

    Returns:
        The names of the re-initialised parameters and buffers, sorted.
    """
    reference = (model_cls or type(model))(**{**_hparams(model), **dims})
    old_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ref_state = reference.state_dict()
    mismatched = sorted(
        name
        for name, value in ref_state.items()
        if name not in old_state or old_state[name].shape != value.shape
    )
    owners = sorted({name.rpartition(".")[0] for name in mismatched}, key=len)
    replaced: list[str] = []
    for owner in owners:
        if any(owner == done or owner.startswith(done + ".") for done in replaced if done):
            continue
        fresh = reference.get_submodule(owner) if owner else reference
        if not owner:
            raise ValueError(
                "the model's own top-level parameters do not match the dims; rebuild it from the dims"
            )
        parent_name, _, child = owner.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, fresh)
        replaced.append(owner)
    restore = {
        name: old_state[name]
        for name, value in model.state_dict().items()
        if name in old_state and name not in mismatched and old_state[name].shape == value.shape
    }
    model.load_state_dict(restore, strict=False)
    hparams = getattr(model, "hparams", None)
    if hparams is not None and hasattr(hparams, "update"):
        hparams.update(dict(dims))
    return mismatched


def _transplant(
    old_state: Mapping[str, torch.Tensor], model: nn.Module, skip: Iterable[str] = ()
) -> tuple[list[str], list[str]]:
    """Copies old tensors into ``model`` where name and shape match; returns (kept, fresh)."""
    skip = set(skip)
    state = model.state_dict()
    kept = [n for n, v in state.items() if n not in skip and n in old_state and old_state[n].shape == v.shape]
    model.load_state_dict({n: old_state[n] for n in kept}, strict=False)
    fresh = [n for n in state if n not in kept and n not in skip]
    return kept, fresh


# -- recover ----------------------------------------------------------------------------------
@dataclass
class RecoveryPlan:
    """What to do after a pause, and the objects to do it with.

    Attributes:
        path: ``"data"`` (re-prepared data, remapped weights), ``"init"`` (re-initialised
            mismatched layers) or ``"resume"`` (nothing to repair: resume the checkpoint).
        advice: ``"continue"`` (train on from the recovered weights) or ``"restart"`` (a fresh
            run is the better use of the next device-hours).
        reason: why, in words, with the waste figures.
        model: the recovered model.
        datamodule: the datamodule to train with (re-prepared in the mandated order on the data
            path).
        ckpt_path: pass to ``trainer.fit`` on the resume path; ``None`` otherwise (a fresh fit,
            so the optimizer is rebuilt).
        kept: parameter names copied unchanged from the checkpoint.
        reinitialised: parameter names that got a fresh init.
        remapped: per embedding parameter, ``{"common": n, "new": m}`` token counts.
        waste: the waste report of the paused run.
        reasons: the diagnoses or violations that caused the pause (plain data).
    """

    path: Literal["data", "init", "resume"]
    advice: Literal["continue", "restart"]
    reason: str
    model: nn.Module | None
    datamodule: Any
    ckpt_path: str | None = None
    kept: list[str] = field(default_factory=list)
    reinitialised: list[str] = field(default_factory=list)
    remapped: dict[str, dict[str, int]] = field(default_factory=dict)
    waste: dict[str, Any] = field(default_factory=dict)
    reasons: list[dict[str, Any]] = field(default_factory=list)

    def fit_kwargs(self) -> dict[str, Any]:
        """``trainer.fit(**plan.fit_kwargs())``: model, datamodule and ``ckpt_path``.

        This follows the recovered weights whatever the advice; on ``"restart"`` use
        :meth:`fresh_model` instead of ``model``.
        """
        return {"model": self.model, "datamodule": self.datamodule, "ckpt_path": self.ckpt_path}

    def fresh_model(self) -> nn.Module:
        """A freshly initialised model of the same class and hyper-parameters (for a restart)."""
        if self.model is None:
            raise ValueError("this plan holds no model to copy the configuration from")
        return type(self.model)(**_hparams(self.model))


def _import(qualname: str) -> Any:
    module, _, name = qualname.rpartition(".")
    target: Any = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    return target


def _choose_path(reasons: list[Mapping[str, Any]]) -> Literal["data", "init", "resume"]:
    symptoms = {r.get("symptom") for r in reasons if r.get("type") == "diagnosis"}
    rules = {r.get("suspected_rule") or r.get("rule") for r in reasons}
    if reasons and symptoms and symptoms <= _RESUME_SYMPTOMS and len(symptoms) == len(reasons):
        return "resume"
    if rules and rules <= _INIT_RULES:
        return "init"
    return "data"


def _advise(
    path: str, waste: Mapping[str, Any], kept_share: float, restart_below: float, min_kept: float
) -> tuple[Literal["continue", "restart"], str]:
    spent = _describe_waste(waste) if waste else "an unknown amount of device time"
    if path == "resume":
        return "continue", f"the data and the model are sound; fix the loader and resume ({spent} kept)"
    progress = waste.get("progress") if waste else None
    if progress is not None and progress < restart_below:
        return "restart", (
            f"the run had spent {spent}, under {restart_below:.0%} of its plan: a clean restart "
            "costs little and carries nothing of the wrong order"
        )
    if kept_share < min_kept:
        return "restart", (
            f"only {kept_share:.0%} of the weights could be kept (under {min_kept:.0%}); the run had "
            f"spent {spent}: restart"
        )
    return "continue", (
        f"{kept_share:.0%} of the weights are kept or remapped, worth the {spent} already spent: "
        "train on from them with a fresh optimizer"
    )


def recover(
    checkpoint_path: str | Path,
    datamodule: Any = None,
    model_cls: type[nn.Module] | None = None,
    *,
    path: Literal["data", "init", "resume"] | None = None,
    datamodule_cls: type | None = None,
    restart_below: float = 0.05,
    min_kept: float = 0.5,
    map_location: str | torch.device = "cpu",
) -> RecoveryPlan:
    """Builds what the next ``trainer.fit`` needs after a pause, and advises continue or restart.

    * **data path** (a data-order error: ``vocab-before-clean``, ``shard-before-normalize``,
      ``fit-before-split``, ...): without ``datamodule``, a corrected one is built from the
      checkpoint's datamodule class and hyper-parameters with the mandated order
      (``order=None``) and ``enforce=True``, and prepared. The new model is built from the new
      dims; every parameter whose name and shape match is copied; embedding tables are remapped
      by token string (:func:`remap_embedding`; new tokens keep the new model's fresh init).
    * **init path** (``init-before-data``): same data; the model is rebuilt from the data's dims
      and every parameter whose shape still matches is kept, the rest re-initialised (as
      :func:`reinit_mismatched`).
    * **resume path** (``data-starvation``, ``memory-swing``: nothing wrong with data or
      weights): the plan carries ``ckpt_path`` and the original model.

    On the data and init paths the plan has ``ckpt_path=None``: run ``trainer.fit(plan.model,
    plan.datamodule)``, which rebuilds the optimizer (the old moments belong to other parameters).

    Advice: ``restart`` when the run got less than ``restart_below`` of its planned steps (the
    waste is small and a clean run leaves no doubt), or when less than ``min_kept`` of the
    weights could be kept; ``continue`` otherwise.

    Args:
        checkpoint_path: a checkpoint written by :func:`pause` (a plain Lightning checkpoint
            works too: then there is no old vocabulary, so embeddings are only kept when their
            shapes match, and the path defaults to ``data``).
        datamodule: the corrected datamodule, if you built it yourself.
        model_cls: the model class (default: the class recorded in the checkpoint).
        path: force a repair path instead of choosing it from the pause reasons.
        datamodule_cls: the datamodule class (default: recorded in the checkpoint).
        restart_below: the progress share under which a restart is advised.
        min_kept: the least share of kept weight elements for a continue.
        map_location: where to load the checkpoint's tensors.

    Returns:
        A :class:`RecoveryPlan`.
    """
    checkpoint = torch.load(str(checkpoint_path), map_location=map_location, weights_only=False)
    payload = checkpoint.get(PAUSE_KEY) or {}
    reasons = list(payload.get("reason", []))
    waste = dict(payload.get("waste") or {})
    chosen = path or _choose_path(reasons)
    hparams = dict(checkpoint.get("hyper_parameters") or {})
    if model_cls is None:
        recorded = (payload.get("model") or {}).get("class")
        if recorded is None:
            raise ValueError("the checkpoint records no model class: pass model_cls=")
        model_cls = _import(recorded)

    if chosen == "resume":
        model = model_cls(**hparams)
        model.load_state_dict(checkpoint["state_dict"])
        advice, why = _advise(chosen, waste, 1.0, restart_below, min_kept)
        return RecoveryPlan(
            chosen, advice, why, model, datamodule, str(checkpoint_path), waste=waste, reasons=reasons
        )

    if datamodule is None:
        datamodule = _rebuild_datamodule(payload, checkpoint, datamodule_cls, mandated=chosen == "data")
    dims = dict(datamodule.dims)
    model = model_cls(**{**hparams, **dims})
    old_state = checkpoint["state_dict"]
    remapped: dict[str, dict[str, int]] = {}
    skip: list[str] = []
    old_vocab = payload.get("vocab")
    new_tokenizer = getattr(datamodule, "tokenizer", None)
    if chosen == "data" and old_vocab and new_tokenizer is not None:
        new_vocab = new_tokenizer.get_vocab()
        for name, module in model.named_modules():
            weight_name = f"{name}.weight" if name else "weight"
            old = old_state.get(weight_name)
            if not isinstance(module, nn.Embedding) or old is None:
                continue
            if old.shape[0] < max(old_vocab.values()) + 1 or old.shape[1] != module.embedding_dim:
                continue  # not a token table (e.g. positions): left to the shape rule
            with torch.no_grad():
                module.weight.copy_(
                    remap_embedding(
                        old, old_vocab, new_vocab, init=module.weight, num_embeddings=module.num_embeddings
                    )
                )
            common = sum(1 for t in new_vocab if t in old_vocab)
            remapped[weight_name] = {"common": common, "new": len(new_vocab) - common}
            skip.append(weight_name)
    kept, fresh = _transplant(old_state, model, skip)
    state = model.state_dict()
    total = sum(v.numel() for v in state.values()) or 1
    kept_share = sum(state[n].numel() for n in [*kept, *skip]) / total
    advice, why = _advise(chosen, waste, kept_share, restart_below, min_kept)
    return RecoveryPlan(
        chosen,
        advice,
        why,
        model,
        datamodule,
        None,
        kept=kept,
        reinitialised=fresh,
        remapped=remapped,
        waste=waste,
        reasons=reasons,
    )


def _rebuild_datamodule(
    payload: Mapping[str, Any], checkpoint: Mapping[str, Any], datamodule_cls: type | None, mandated: bool
) -> Any:
    info = payload.get("datamodule") or {}
    cls = datamodule_cls or (_import(info["class"]) if info.get("class") else None)
    if cls is None:
        raise ValueError("the checkpoint records no datamodule class: pass datamodule= or datamodule_cls=")
    kwargs = dict(checkpoint.get("datamodule_hyper_parameters") or info.get("hparams") or {})
    if mandated:
        # The repair: the mandated order, enforced. Everything else as the paused run had it.
        kwargs.update(order=None, enforce=True)
    datamodule = cls(**kwargs)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return datamodule
