"""``recover()``: read a paused checkpoint safely, decide, repair, and hand back a plan.

A short orchestration of the other modules: :func:`~lightning_order.checkpoint.load_checkpoint`
(``weights_only=True``), :mod:`.decisions` (which path, continue or restart), :mod:`.weights`
(the transplant and the embedding remap). Classes are never imported by the names a checkpoint
holds: the caller passes them, or the name is one of this package's own public classes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import Any

import torch
from torch import nn

from lightning_order.checkpoint import load_checkpoint
from lightning_order.checks.resume import stored_position
from lightning_order.errors import CheckpointError
from lightning_order.ledger import CHECKPOINT_KEY
from lightning_order.recovery.decisions import Advice, Path, advise, choose_path, kept_share
from lightning_order.recovery.weights import model_hparams, remap_token_embeddings, transplant

__all__ = ["RecoveryPlan", "recover"]


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
        position: where the paused run stood in its epoch (``epoch``, ``samples``: global samples
            of it consumed, ``seed``, ``global_batch``, ...; empty when the checkpoint holds none).
            On the resume path ``trainer.fit(ckpt_path=...)`` continues exactly there (the train
            loader's state is in the checkpoint, and ``OrderValidator`` proves it before the first
            step); the data and init paths start a fresh fit at epoch 0.
    """

    path: Path
    advice: Advice
    reason: str
    model: nn.Module | None
    datamodule: Any
    ckpt_path: str | None = None
    kept: list[str] = field(default_factory=list)
    reinitialised: list[str] = field(default_factory=list)
    remapped: dict[str, dict[str, int]] = field(default_factory=dict)
    waste: dict[str, Any] = field(default_factory=dict)
    reasons: list[dict[str, Any]] = field(default_factory=list)
    position: dict[str, Any] = field(default_factory=dict)

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
        return type(self.model)(**model_hparams(self.model))


def recover(
    checkpoint_path: str | FilePath,
    datamodule: Any = None,
    model_cls: type[nn.Module] | None = None,
    *,
    path: Path | None = None,
    datamodule_cls: type | None = None,
    restart_below: float = 0.05,
    min_kept: float = 0.5,
    map_location: str | torch.device = "cpu",
    cache_dir: str | os.PathLike[str] | None = None,
) -> RecoveryPlan:
    """Builds what the next ``trainer.fit`` needs after a pause, and advises continue or restart.

    * **data path** (a data-order error: ``vocab-before-clean``, ``shard-before-normalize``,
      ``fit-before-split``, ...): without ``datamodule``, a corrected one is built from the
      checkpoint's datamodule class and hyper-parameters with the mandated order
      (``order=None``) and ``enforce=True``, and prepared. The new model is built from the new
      dims; every parameter whose name and shape match is copied; embedding tables are remapped
      by token string (:func:`~lightning_order.recovery.remap_embedding`; new tokens keep the new
      model's fresh init).
    * **init path** (``init-before-data``): same data; the model is rebuilt from the data's dims
      and every parameter whose shape still matches is kept, the rest re-initialised (as
      :func:`~lightning_order.recovery.reinit_mismatched`).
    * **resume path** (``data-starvation``, ``memory-swing``: nothing wrong with data or
      weights): the plan carries ``ckpt_path`` and the original model.

    On the data and init paths the plan has ``ckpt_path=None``: run ``trainer.fit(plan.model,
    plan.datamodule)``, which rebuilds the optimizer (the old moments belong to other parameters).

    Advice: ``restart`` when the run got less than ``restart_below`` of its planned steps (the
    waste is small and a clean run leaves no doubt), or when less than ``min_kept`` of the
    weights could be kept; ``continue`` otherwise.

    The checkpoint is read with ``weights_only=True`` (nothing in it runs), and no class it
    names is imported: the model and datamodule classes are ``model_cls`` / ``datamodule_cls``,
    or, when the checkpoint names one of lightning_order's own public classes, that class.

    Args:
        checkpoint_path: a checkpoint written by :func:`~lightning_order.recovery.pause` (a plain
            Lightning checkpoint works too: then there is no old vocabulary, so embeddings are
            only kept when their shapes match, and the path defaults to ``data``).
        datamodule: the corrected datamodule, if you built it yourself.
        model_cls: the model class (needed unless the checkpoint names a lightning_order model).
        path: force a repair path instead of choosing it from the pause reasons.
        datamodule_cls: the datamodule class (needed on the data path without ``datamodule``,
            unless the checkpoint names a lightning_order datamodule).
        restart_below: the progress share under which a restart is advised.
        min_kept: the least share of kept weight elements for a continue.
        map_location: where to load the checkpoint's tensors.
        cache_dir: where a rebuilt datamodule prepares its data; ``None``: the default cache
            root (``$LIGHTNING_ORDER_CACHE`` or ``~/.cache/lightning_order``). A path stored in
            the checkpoint is never used: only the caller chooses where ``recover()`` writes.

    Returns:
        A :class:`RecoveryPlan`.

    Raises:
        CheckpointError: the checkpoint holds more than plain data, or it names a class that is
            not lightning_order's own and the matching argument was not passed.
    """
    checkpoint = load_checkpoint(checkpoint_path, map_location=map_location)
    payload = checkpoint.get(CHECKPOINT_KEY) or {}
    reasons = list(payload.get("reason", []))
    position = dict(stored_position(checkpoint, "", owner="OrderValidator") or {})
    waste = dict(payload.get("waste") or {})
    chosen = path or choose_path(reasons)
    hparams = dict(checkpoint.get("hyper_parameters") or {})
    model_cls = model_cls or _own_class((payload.get("model") or {}).get("class"), "model_cls", "model")
    old_state = checkpoint["state_dict"]

    if chosen == "resume":
        model = model_cls(**hparams)
        model.load_state_dict(old_state)
        advice, why = advise(chosen, waste, 1.0, restart_below, min_kept)
        return RecoveryPlan(
            chosen,
            advice,
            why,
            model,
            datamodule,
            str(checkpoint_path),
            waste=waste,
            reasons=reasons,
            position=position,
        )

    if datamodule is None:
        datamodule = _rebuild_datamodule(
            payload, checkpoint, datamodule_cls, mandated=chosen == "data", cache_dir=cache_dir
        )
    model = model_cls(**{**hparams, **dict(datamodule.dims)})
    old_vocab = payload.get("vocab")
    tokenizer = getattr(datamodule, "tokenizer", None)
    remapped: dict[str, dict[str, int]] = {}
    if chosen == "data" and old_vocab and tokenizer is not None:
        remapped = remap_token_embeddings(model, old_state, old_vocab, tokenizer.get_vocab())
    kept, fresh = transplant(old_state, model, skip=remapped)
    sizes = {name: value.numel() for name, value in model.state_dict().items()}
    advice, why = advise(chosen, waste, kept_share(sizes, [*kept, *remapped]), restart_below, min_kept)
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
        position=position,
    )


def _own_class(recorded: str | None, argument: str, what: str) -> type:
    """The lightning_order public class named ``recorded``; anything else must be passed.

    Only this package's own public API is looked up (by comparing names, not importing them), so
    a checkpoint cannot make ``recover()`` import or build anything of its choosing.
    """
    import lightning_order

    own = {
        name: obj
        for name, obj in ((n, getattr(lightning_order, n)) for n in lightning_order.__all__)
        if isinstance(obj, type)
    }
    # A recorded path of this package (today's module or an earlier one, e.g. before a module
    # moved) names the public class of the same name; nothing is imported by the name.
    public = (
        recorded.rpartition(".")[2]
        if recorded and recorded.startswith("lightning_order.") and recorded.rpartition(".")[2] in own
        else None
    )
    if recorded is None:
        raise CheckpointError(
            f"the checkpoint records no {what} class: pass {argument}=YourClass to recover()"
        )
    if public is None:
        raise CheckpointError(
            f"the checkpoint names the {what} class '{recorded}'; recover() imports nothing a checkpoint "
            f"names (importing and calling it could run code): pass {argument}={recorded.rpartition('.')[2]} "
            "(the class itself) if you trust it"
        )
    return own[public]


def _rebuild_datamodule(
    payload: Mapping[str, Any],
    checkpoint: Mapping[str, Any],
    datamodule_cls: type | None,
    mandated: bool,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Any:
    info = payload.get("datamodule") or {}
    if datamodule_cls is None:
        if not info.get("class"):
            raise CheckpointError(
                "the checkpoint records no datamodule class: pass datamodule= or datamodule_cls= to recover()"
            )
        datamodule_cls = _own_class(info["class"], "datamodule_cls", "datamodule")
    kwargs = dict(checkpoint.get("datamodule_hyper_parameters") or info.get("hparams") or {})
    # Where to write is the caller's choice alone: a checkpoint is data from elsewhere, and the
    # folder it names may be anyone's.
    kwargs.pop("cache_dir", None)
    if cache_dir is not None:
        kwargs["cache_dir"] = os.fspath(cache_dir)
    if mandated:
        # The repair: the mandated order, enforced. Everything else as the paused run had it.
        kwargs.update(order=None, enforce=True)
    datamodule = datamodule_cls(**kwargs)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return datamodule
