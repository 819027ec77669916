"""manifest_checks.py: a manifest is read only from a regular file, and its records have their types.

What ``audit`` and ``graph`` make of it (exit 2, one line): tests/unit/cli/test_auditing_hostile.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from helpers import clean_ledger

from lightning_order.errors import ManifestError
from lightning_order.ledger import StepLedger


def test_a_fifo_named_manifest_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "manifest.json")  # no writer: a blocking open would never return
    with pytest.raises(ManifestError, match=r"manifest\.json is a FIFO, not a regular file"):
        StepLedger.load(tmp_path)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ({"records": [3]}, "ledger record 0 is not a mapping of fields (got int)"),
        ({"records": "abc"}, "'records' must be a list, got str"),
        ({"info": [1]}, "'info' must be a mapping, got list"),
        ({"records": [{"step": "load", "seq": True}]}, "field 'seq' must be an integer, got bool"),
        ({"records": [{"step": "load", "seq": 0, "inputs": {"x": 1}}]}, "inputs['x'] must be a fingerprint"),
        ({"records": [{"step": None, "seq": 0}]}, "field 'step' must be a string, got NoneType"),
    ],
)
def test_a_ledger_state_of_odd_types_is_one_manifest_error(edit: dict[str, Any], expected: str) -> None:
    # The path a checkpoint's ledger takes (no manifest checksum in the way).
    state = {**clean_ledger().state_dict(), **edit}
    with pytest.raises(ManifestError) as caught:
        StepLedger.from_state_dict(state)
    assert expected in str(caught.value)


def test_a_well_formed_ledger_still_round_trips(tmp_path: Path) -> None:
    ledger = clean_ledger()
    assert StepLedger.load(ledger.save(tmp_path)).fingerprint == ledger.fingerprint
    assert StepLedger.from_state_dict(ledger.state_dict()).steps() == ledger.steps()
