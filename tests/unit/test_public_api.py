"""The public API (``lightning_order/__init__.py``): every public name imports lazily, ``__all__`` is
unchanged, and importing the package imports neither torch nor Lightning."""

from __future__ import annotations

import pytest
from helpers import in_fresh_process

import lightning_order

_HEAVY = ("torch", "pytorch_lightning", "lightning")


def test_every_public_name_imports_and_all_is_unchanged():
    assert len(lightning_order.__all__) == len(set(lightning_order.__all__)) == 34
    for name in lightning_order.__all__:
        assert getattr(lightning_order, name) is not None, name
    assert set(lightning_order.__all__) <= set(dir(lightning_order))
    with pytest.raises(AttributeError):
        lightning_order.NoSuchName  # noqa: B018


def test_importing_the_package_imports_neither_torch_nor_lightning():
    code = f"""
import json, sys
import lightning_order, lightning_order.data, lightning_order.data.engine.runner, lightning_order.ledger
from lightning_order import StepLedger, DataError, STANDARD_PIPELINE, CacheWarning
print(json.dumps([m for m in {_HEAVY!r} if m in sys.modules]))
"""
    assert in_fresh_process(code) == []


def test_public_api_is_exported():
    for name in lightning_order.__all__:
        assert hasattr(lightning_order, name), name
