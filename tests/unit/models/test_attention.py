"""models/attention.py: per-document positions, document indices and the block-diagonal causal mask."""

from __future__ import annotations

import pytest
import torch

from lightning_order.models.attention import document_ids, document_mask, document_positions

EOS = 1


@pytest.mark.parametrize(
    ("ids", "positions"),
    [
        ([5, 6, 1, 7, 8, 1, 9], [0, 1, 2, 0, 1, 2, 0]),  # the token after each end-of-text is position 0
        ([1, 2, 3, 1, 1, 4], [0, 0, 1, 2, 0, 0]),  # an end-of-text first, two in a row (an empty document)
        ([4, 5, 6, 7], [0, 1, 2, 3]),  # no boundary: plain positions
        ([3, 2, 9, 1], [0, 1, 2, 3]),  # an end-of-text last: the next document starts in the next block
    ],
)
def test_positions_restart_after_each_end_of_text(ids: list[int], positions: list[int]) -> None:
    assert document_positions(torch.tensor([ids]), EOS).tolist() == [positions]
    assert document_positions(torch.tensor(ids), EOS).tolist() == positions  # one row, unbatched


def test_a_bos_after_end_of_text_is_position_0() -> None:
    bos = 2
    ids = torch.tensor([[7, 8, EOS, bos, 9, 9, EOS, bos]])
    positions = document_positions(ids, EOS)
    assert (positions[ids == bos] == 0).all()


def test_documents_and_mask_are_block_diagonal_and_causal() -> None:
    positions = torch.tensor([[0, 1, 2, 0, 1, 0]])
    assert document_ids(positions).tolist() == [[0, 0, 0, 1, 1, 2]]
    mask = document_mask(positions)[0, 0]
    expected = torch.zeros(6, 6, dtype=torch.bool)
    for lo, hi in ((0, 3), (3, 5), (5, 6)):
        expected[lo:hi, lo:hi] = torch.ones(hi - lo, hi - lo, dtype=torch.bool).tril()
    assert torch.equal(mask, expected)
    assert document_mask(positions).shape == (1, 1, 6, 6)


def test_a_row_opening_mid_document_starts_a_document() -> None:
    """A row's first token opens a document whatever its position (the block began inside one)."""
    assert document_ids(torch.tensor([[5, 6, 0, 1]])).tolist() == [[0, 0, 1, 1]]
