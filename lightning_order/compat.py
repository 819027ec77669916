"""One set of Lightning base classes that both ``pytorch_lightning`` and ``lightning.pytorch`` accept.

Lightning ships the same code under two import names, and each Trainer checks what it is given
against *its own* classes: ``isinstance(model, LightningModule)`` (else "model must be a
LightningModule"), and ``is_overridden(hook, obj)``, which picks the parent class by ``isinstance``
(else "Expected a parent") and then compares the object's hook's ``__code__`` with the parent's.

So the bases here subclass both namespaces' classes (``pytorch_lightning`` first; only it when
``lightning`` is not installed): every ``isinstance`` check passes under either Trainer. The
second check needs one more step: most hooks are the same code object in both namespaces, but a
few differ (their docstrings name the namespace), and a class inheriting the ``pytorch_lightning``
version would look "overridden" to a ``lightning.pytorch`` Trainer (which then calls
``val_dataloader`` that is not there, or refuses a model that overrides both ``configure_model``
and ``configure_sharded_model``). For exactly those hooks the base holds a descriptor that hands
out the implementation of the namespace of the Trainer the object is attached to (Lightning sets
``model.trainer`` and ``datamodule.trainer`` before its first such check); a subclass that
defines the hook itself is unaffected. The trade-off: a little indirection in a handful of hook
lookups, against classes that users of either namespace take as they are.

Use: ``from lightning_order import compat as pl`` then ``class X(pl.LightningDataModule)``.
"""

from __future__ import annotations

import importlib
import inspect
import types
from typing import TYPE_CHECKING, Any

import pytorch_lightning

__all__ = ["NAMESPACES", "Callback", "LightningDataModule", "LightningModule", "namespace_of"]

#: The import names Lightning is published under; the first is this package's dependency.
NAMESPACES: tuple[str, ...] = ("pytorch_lightning", "lightning.pytorch")


def _other_namespace() -> types.ModuleType | None:
    try:
        return importlib.import_module(NAMESPACES[1])
    except ImportError:  # `lightning` is optional: then only pytorch_lightning is served
        return None


def namespace_of(obj: Any) -> str | None:
    """``"pytorch_lightning"`` or ``"lightning.pytorch"``: the namespace of ``obj``'s class, else ``None``."""
    module = getattr(getattr(obj, "__class__", type(obj)), "__module__", "") or ""
    return next((ns for ns in NAMESPACES if module == ns or module.startswith(ns + ".")), None)


class _ByTrainer:
    """A hook whose implementation follows the namespace of the Trainer its object is attached to."""

    def __init__(self, name: str, by_namespace: dict[str, types.FunctionType]) -> None:
        self.name = name
        self.by_namespace = by_namespace
        self.default = by_namespace[NAMESPACES[0]]
        self.__doc__ = self.default.__doc__

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self.default
        state = getattr(instance, "__dict__", {})
        # LightningModule keeps its Trainer in `_trainer`, LightningDataModule in `trainer`.
        trainer = state.get("_trainer") or state.get("trainer")
        function = self.by_namespace.get(namespace_of(trainer) or "", self.default)
        return types.MethodType(function, instance)


def _function(cls: type, name: str) -> types.FunctionType | None:
    value = inspect.getattr_static(cls, name, None)
    return value if isinstance(value, types.FunctionType) else None


def _dual(name: str, primary: type, other: type | None) -> type:
    """``class name(primary, other)``, with the hooks whose code differs resolved by Trainer namespace."""
    if other is None:
        return type(name, (primary,), {"__module__": __name__, "__doc__": primary.__doc__})
    body: dict[str, Any] = {"__module__": __name__, "__doc__": primary.__doc__}
    for attr in dir(primary):
        mine, theirs = _function(primary, attr), _function(other, attr)
        if mine is not None and theirs is not None and mine.__code__ != theirs.__code__:
            body[attr] = _ByTrainer(attr, {NAMESPACES[0]: mine, NAMESPACES[1]: theirs})
    return type(name, (primary, other), body)


_OTHER = _other_namespace()

if TYPE_CHECKING:
    # Type checkers see Lightning's classes; the classes below are subclasses of them.
    from pytorch_lightning import Callback, LightningDataModule

    class LightningModule(pytorch_lightning.LightningModule):
        @property
        def hparams(self) -> Any:  # an AttributeDict: its attributes are the saved arguments
            ...
else:
    #: ``pytorch_lightning.LightningModule`` and, when installed, ``lightning.pytorch.LightningModule``.
    LightningModule: type[pytorch_lightning.LightningModule] = _dual(
        "LightningModule", pytorch_lightning.LightningModule, getattr(_OTHER, "LightningModule", None)
    )
    #: ``pytorch_lightning.LightningDataModule`` and, when installed, its ``lightning.pytorch`` twin.
    LightningDataModule: type[pytorch_lightning.LightningDataModule] = _dual(
        "LightningDataModule",
        pytorch_lightning.LightningDataModule,
        getattr(_OTHER, "LightningDataModule", None),
    )
    #: ``pytorch_lightning.Callback`` and, when installed, ``lightning.pytorch.Callback``.
    Callback: type[pytorch_lightning.Callback] = _dual(
        "Callback", pytorch_lightning.Callback, getattr(_OTHER, "Callback", None)
    )
