"""TokenMeanLoss: a sum and a count of token losses, merged across ranks, equals the flat mean on any split."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
import torch
from torch.nn import functional as F

from lightning_order.models.token_loss import IGNORE_INDEX, TokenMeanLoss, token_loss


def _batches(rows: int = 11, length: int = 8, vocab: int = 30) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(rows, length, vocab, generator=generator)
    labels = torch.randint(0, vocab, (rows, length), generator=generator)
    return logits, labels


def _ranks(
    logits: torch.Tensor, labels: torch.Tensor, cuts: list[int], batch: int, **kwargs
) -> list[TokenMeanLoss]:
    """One metric per rank, rank ``r`` scoring rows ``cuts[r]:cuts[r + 1]`` in batches of ``batch`` rows."""
    metrics = []
    for start, stop in pairwise(cuts):
        metric = TokenMeanLoss(**kwargs)
        for first in range(start, stop, batch):
            last = min(first + batch, stop)
            metric.update(*token_loss(logits[first:last], labels[first:last]))
        metrics.append(metric)
    return metrics


def _merged(metrics: list[TokenMeanLoss]) -> TokenMeanLoss:
    """What the reduction across ranks gives (each state by its dist_reduce_fx), on rank 0."""
    first = metrics[0]
    for other in metrics[1:]:
        first.merge_state(other)
    return first


@pytest.mark.parametrize(
    ("cuts", "batch"),
    [([0, 11], 4), ([0, 6, 11], 4), ([0, 4, 8, 11], 3), ([0, 1, 11], 2), ([0, 3, 4, 9, 11], 5)],
    ids=["one-rank", "6+5", "4+4+3", "1+10", "3+1+5+2"],
)
def test_the_merged_sum_and_count_equal_the_flat_token_mean_on_uneven_shares(
    cuts: list[int], batch: int
) -> None:
    logits, labels = _batches()
    flat = F.cross_entropy(logits.flatten(0, 1), labels.flatten()).item()
    assert _merged(_ranks(logits, labels, cuts, batch)).compute().item() == pytest.approx(flat, rel=1e-6)
    ppl = _merged(_ranks(logits, labels, cuts, batch, exponentiate=True)).compute().item()
    assert ppl == pytest.approx(math.exp(flat), rel=1e-6)


def test_a_mean_of_rank_means_is_what_it_replaces_and_differs_on_uneven_shares() -> None:
    """The reason for the metric: sync_dist's mean of rank means weights a rank of 1 row like one of 10."""
    logits, labels = _batches()
    flat = F.cross_entropy(logits.flatten(0, 1), labels.flatten()).item()
    means = [m.compute().item() for m in _ranks(logits, labels, [0, 1, 11], 4)]
    assert abs(sum(means) / len(means) - flat) > 1e-3


def test_ignored_labels_are_no_tokens() -> None:
    logits, labels = _batches(rows=4)
    labels[0, :5] = IGNORE_INDEX
    labels[3] = IGNORE_INDEX
    total, tokens = token_loss(logits, labels)
    assert tokens.item() == 4 * 8 - 5 - 8
    assert (total / tokens).item() == pytest.approx(
        F.cross_entropy(logits.flatten(0, 1), labels.flatten()).item()
    )
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert math.isnan(TokenMeanLoss().compute().item())  # nothing scored yet: no value, not 0


def test_low_precision_logits_are_summed_in_float32() -> None:
    logits, labels = _batches(rows=4)
    total, _ = token_loss(logits.bfloat16(), labels)
    assert total.dtype == torch.float32
    assert total.item() == pytest.approx(token_loss(logits.bfloat16().float(), labels)[0].item())


def test_its_states_are_reduced_by_sum_and_kept_out_of_checkpoints() -> None:
    metric = TokenMeanLoss()
    metric.update(torch.tensor(3.0), torch.tensor(2))
    other = TokenMeanLoss()
    other.update(torch.tensor(1.0), torch.tensor(2))
    metric.merge_state(other)
    assert (metric.total.item(), metric.tokens.item()) == (4.0, 4)
    assert metric.state_dict() == {}  # no persistent state: old checkpoints load, new ones hold nothing more


def test_the_recipe_docs_give_for_users_own_models_is_exact_too() -> None:
    """docs/lm.md: torchmetrics' MeanMetric fed each batch's mean weighted by its tokens, merged across ranks."""
    from torchmetrics import MeanMetric

    logits, labels = _batches()
    labels[10] = IGNORE_INDEX  # a padding block: no target
    flat = F.cross_entropy(logits.flatten(0, 1), labels.flatten()).item()
    ranks = []
    for start, stop in pairwise([0, 4, 11]):
        metric = MeanMetric()
        for first in range(start, stop, 3):
            total, tokens = token_loss(
                logits[first : min(first + 3, stop)], labels[first : min(first + 3, stop)]
            )
            metric.update(total / tokens.clamp(min=1), weight=tokens)
        ranks.append(metric)
    ranks[0].merge_state(ranks[1])
    assert ranks[0].compute().item() == pytest.approx(flat, rel=1e-6)
