"""``lightning_order.data.engine.config``: what an overridden row-wise step adds to the cache key."""

from __future__ import annotations

import pytest

import lightning_order

_SOURCE = """
class Mine(base):
    def clean(self, text):
        return {body}
"""


def _defined_by_exec(base: type, body: str) -> type:
    """A subclass whose source cannot be read (as with `python -c` or a notebook's exec)."""
    scope: dict = {"base": base}
    exec(_SOURCE.format(body=body), scope)  # the case under test: no file holds this source
    return scope["Mine"]


@pytest.mark.parametrize("module", ["OrderedDataModule", "OrderedLMDataModule"])
def test_an_override_whose_source_cannot_be_read_is_keyed_by_its_code(tmp_path, module):
    import inspect

    base = getattr(lightning_order, module)
    upper = _defined_by_exec(base, "super().clean(text).upper()")
    with pytest.raises(OSError):
        inspect.getsource(upper.clean)  # the case: no source to hash
    lower = _defined_by_exec(base, "super().clean(text).lower()")
    again = _defined_by_exec(base, "super().clean(text).upper()")
    keys = [cls(cache_dir=str(tmp_path)).cache_key for cls in (base, upper, lower, again)]
    assert keys[1] != keys[0]  # an override changes the data
    assert keys[1] != keys[2]  # an edit of it changes the key: the old cleaned data is not reused
    assert keys[1] == keys[3]  # the same code, the same key
