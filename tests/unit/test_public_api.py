"""The public API (``lightning_order/__init__.py``): every public name imports lazily, ``__all__`` is
unchanged, and importing the package imports neither torch nor Lightning."""

from __future__ import annotations

import pytest
from helpers import in_fresh_process, in_preloaded_process, start_preloaded

import lightning_order

_HEAVY = ("torch", "pytorch_lightning", "lightning")
start_preloaded()  # its imports overlap the other tests


def test_every_public_name_imports_and_all_is_unchanged():
    assert len(lightning_order.__all__) == len(set(lightning_order.__all__)) == 58  # 57 + OrderGuard (#47)
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


def test_a_public_name_stays_itself_after_every_module_is_imported():
    """``recording`` is a function, also once the module defining it (and the validator's helpers
    that import it) are imported, with the package a plain module (no class swap tools cannot read)."""
    code = """
import json, sys, types
import lightning_order
import lightning_order.recorder, lightning_order.callbacks.validator.phases
from lightning_order import recording, record_step
print(json.dumps([recording is lightning_order.recorder.recording, callable(record_step),
                  lightning_order.recording is recording, type(sys.modules["lightning_order"]) is types.ModuleType]))
"""
    # The modules it imports load torch and Lightning: a process forked from an interpreter that
    # imported those (and nothing of lightning_order) is as fresh for this.
    assert in_preloaded_process(code) == [True, True, True, True]
