"""The mean token loss of an evaluation, reduced exactly across ranks: a sum and a count.

A validation split shared out by data-parallel rank (``OrderedLMDataModule``, shares differing by a
block) gives ranks unequal numbers of tokens. Logging each rank's mean with ``sync_dist=True``
averages the rank means, weighting every rank alike instead of every token: close to the 1-rank
value, not equal to it. :class:`TokenMeanLoss` keeps two states, the sum of the token losses and
the token count, both reduced across ranks by a sum, and divides once at the end: the value is the
1-rank value (up to float rounding) whatever the world size and however uneven the shares, and
``exp`` of it is the perplexity. Ranks of one tensor-parallel group score the same tokens: every
token counted as many times in both states, the ratio is unchanged.

:func:`token_loss` is the pure part (one batch's sum and count), the metric the small stateful shell
(torchmetrics' habit). The states are float32, as torchmetrics' own; ``metric.set_dtype(torch.float64)``
sums a very long evaluation in double precision where the device has it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F
from torchmetrics import Metric

__all__ = ["IGNORE_INDEX", "TokenMeanLoss", "token_loss"]

#: Labels with this id are no target (PyTorch's and ``transformers``' convention).
IGNORE_INDEX = -100


def token_loss(
    logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = IGNORE_INDEX
) -> tuple[torch.Tensor, torch.Tensor]:
    """The summed next-token cross-entropy of a batch and the number of target tokens.

    Args:
        logits: ``B × T × V`` (computed in float32 whatever their dtype).
        labels: ``B × T`` target ids; ``ignore_index`` marks no target.
        ignore_index: the label that is no target.

    Returns:
        ``(sum of the token losses, tokens)``: a float scalar and an integer scalar.
    """
    total = F.cross_entropy(
        logits.flatten(0, -2).float(), labels.flatten(), ignore_index=ignore_index, reduction="sum"
    )
    return total, (labels != ignore_index).sum()


class TokenMeanLoss(Metric):
    """The mean loss per token over every batch of every rank: ``sum of token losses / tokens``.

    Examples:
        >>> metric = TokenMeanLoss()
        >>> metric.update(torch.tensor(6.0), torch.tensor(3))
        >>> metric.update(torch.tensor(1.0), torch.tensor(1))
        >>> metric.compute()
        tensor(1.7500)

    Args:
        exponentiate: compute ``exp`` of the mean (the perplexity).
        kwargs: :class:`torchmetrics.Metric`'s keyword arguments.
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False
    total: torch.Tensor
    tokens: torch.Tensor

    def __init__(self, exponentiate: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.exponentiate = exponentiate
        self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("tokens", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, total: torch.Tensor, tokens: torch.Tensor) -> None:
        """Adds one batch's summed token loss and its number of target tokens (:func:`token_loss`)."""
        self.total += total.detach().to(self.total.dtype)
        self.tokens += tokens.detach().to(self.tokens.dtype)

    def compute(self) -> torch.Tensor:
        """The mean token loss (its ``exp`` with ``exponentiate``); ``nan`` before any token."""
        mean = self.total / self.tokens
        return mean.exp() if self.exponentiate else mean
