"""``lightning_order.checkpoint``: ``plain`` turns what a callback stores into data that loads with ``weights_only=True``.

Safe loading through every path that reads a checkpoint: tests/integration/test_checkpoint_safety.py.
"""

from __future__ import annotations

from pathlib import Path

import torch

from lightning_order.checkpoint import plain


def test_plain_turns_anything_into_weights_only_data(tmp_path: Path) -> None:
    value = plain(
        {"p": tmp_path, "t": (1, 2.5, float("inf")), "s": {3, 1}, 4: torch.tensor(2.0), "o": object()}
    )
    assert value["p"] == str(tmp_path) and value["t"] == [1, 2.5, "inf"] and value["s"] == [1, 3]
    assert torch.equal(value["4"], torch.tensor(2.0)) and value["o"].startswith("<object")
    torch.save(value, tmp_path / "v.pt")
    assert torch.load(tmp_path / "v.pt", weights_only=True)["t"] == [1, 2.5, "inf"]
