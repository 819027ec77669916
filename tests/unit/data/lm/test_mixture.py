"""Weighted mixtures of ``OrderedLMDataModule`` (issue #34, item 5; data/lm/mixture.py).

Two sources at 0.7 / 0.3: deduplicated together (a near-copy across them is one document), split
per source, packed per source (no block holds words of both), and the train blocks served so each
source's token share is its weight within one point; the same data whatever ``num_proc``; the
mixture in the ledger and ``audit``; a single source unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lightning_order import DataError, LMSource, OrderedLMDataModule
from lightning_order.data.lm.artefacts import read_blocks
from lightning_order.data.lm.config import LMConfig
from lightning_order.data.lm.mixture import mixture_counts, mixture_index
from tests.mixtures import mixture_dm, source_shares, write_sources


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mixture")
    write_sources(folder)
    return folder


@pytest.fixture(scope="module")
def mixed(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> OrderedLMDataModule:
    dm = mixture_dm(corpus, tmp_path_factory.mktemp("cache"))
    dm.setup("fit")
    return dm


def test_two_sources_at_07_03_serve_train_token_shares_within_one_point(mixed: OrderedLMDataModule) -> None:
    shares = source_shares(mixed, mixed.blocks("train"))  # every block the first epoch serves
    assert shares["both"] == 0.0  # packed per source: no block spans two sources
    assert abs(shares["web"] - 0.7) <= 0.01 and abs(shares["code"] - 0.3) <= 0.01
    # the sources' own train tokens are far from 0.7 / 0.3: the weights did it
    mixture = mixed.ledger.latest("pack").stats["mixture"]
    train = mixture["tokens"]["train"]
    assert abs(train[0] / sum(train) - 0.7) > 0.1
    assert mixture["sources"] == ["web", "code"] and mixture["weights"] == [0.7, 0.3]
    assert all(abs(s - w) <= 0.01 for s, w in zip(mixture["shares"], [0.7, 0.3]))
    served = mixed.ledger.latest("shard").stats["mixture_shares"]
    assert served == pytest.approx([shares["web"], shares["code"]])


def test_a_near_duplicate_across_sources_is_one_document_and_every_source_is_split(tmp_path: Path) -> None:
    write_sources(tmp_path / "data", twin=True)
    dm = mixture_dm(tmp_path / "data", tmp_path / "cache")
    dm.prepare_data()
    assert dm.ledger.latest("load").stats["source_rows"] == [200, 121]
    assert dm.ledger.latest("dedup").stats["near_removed"] == 1
    split = dm.ledger.latest("split").stats
    assert sum(split["train_source_rows"]) + sum(split["val_source_rows"]) == 320
    assert all(v > 0 for v in [*split["train_source_rows"], *split["val_source_rows"]])
    assert len(dm.documents("train")) == sum(split["train_source_rows"])


def test_the_validation_blocks_are_packed_per_source_too(mixed: OrderedLMDataModule) -> None:
    assert source_shares(mixed, mixed.blocks("val"))["both"] == 0.0
    pack = mixed.ledger.latest("pack").stats
    assert sum(pack["val_source_blocks"]) == pack["val_blocks"] and min(pack["val_source_blocks"]) > 0


def test_the_validator_finds_no_violation_in_a_mixture_at_its_weights(mixed: OrderedLMDataModule) -> None:
    from lightning_order.pipelines import spec_for

    assert spec_for(ledger=mixed.ledger).check(mixed.ledger) == []


def test_num_proc_1_and_2_prepare_the_same_mixture(
    corpus: Path, mixed: OrderedLMDataModule, tmp_path: Path
) -> None:
    other = mixture_dm(corpus, tmp_path, num_proc=2)
    other.setup("fit")
    assert other.cache_key == mixed.cache_key and other.data_fingerprints() == mixed.data_fingerprints()
    for split in ("train", "val"):
        assert np.array_equal(
            np.asarray(read_blocks(other.cache_path)[split]), np.asarray(read_blocks(mixed.cache_path)[split])
        )
    assert other.ledger.latest("pack").stats["mixture"] == mixed.ledger.latest("pack").stats["mixture"]
    assert np.array_equal(other.blocks("train"), mixed.blocks("train"))


def test_the_weights_enter_the_cache_key_and_a_single_source_config_is_unchanged(
    corpus: Path, tmp_path: Path
) -> None:
    a = mixture_dm(corpus, tmp_path, weights=(0.7, 0.3))
    b = mixture_dm(corpus, tmp_path, weights=(0.5, 0.5))
    assert a.cache_key != b.cache_key
    assert mixture_dm(corpus, tmp_path, weights=(0.7, 0.3), mixture_tolerance=0.05).cache_key == a.cache_key
    single = LMConfig(dataset="text", data_files=str(corpus / "web" / "docs.txt"))
    identity = single.identity(["load"])
    assert "sources" not in identity and "mixture_tolerance" not in identity


def test_a_mapping_of_path_to_weight_is_a_mixture(corpus: Path, tmp_path: Path) -> None:
    web, code = str(corpus / "web" / "docs.txt"), str(corpus / "code" / "docs.txt")
    cfg = LMConfig(sources={web: 0.7, code: 0.3})
    assert [(s.name, s.weight, s.dataset) for s in cfg.sources] == [(web, 0.7, "text"), (code, 0.3, "text")]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"sources": [LMSource(path="x.txt", weight=-1)]}, "weight of source 0"),
        ({"sources": [{"path": "x.txt"}]}, "must give path and weight"),
        ({"sources": []}, "sources is empty"),
        ({"sources": {"x.txt": 1.0}, "dataset": "text", "data_files": "x.txt"}, "sources replaces dataset"),
        ({"sources": {"x.txt": 1.0}, "mixture_tolerance": 2.0}, "mixture_tolerance must be"),
    ],
)
def test_a_bad_mixture_is_refused_naming_the_field_and_the_fix(kwargs: dict, needle: str) -> None:
    with pytest.raises(DataError, match=needle) as err:
        LMConfig(**kwargs)
    assert err.value.step in ("load", "shard")


def test_the_draw_shares_the_total_by_weight_upsampling_and_interleaving() -> None:
    assert mixture_counts([10, 90], [0.5, 0.5]) == [50, 50]
    assert mixture_counts([3, 0], [0.5, 0.5]) == [3, 0]  # a source with no block draws none
    index = mixture_index([10, 90], [50, 50], seed=0)
    web = index < 10
    assert web.sum() == 50 and np.array_equal(np.bincount(index[web]), np.full(10, 5))  # each block 5 times
    assert abs(web[:10].mean() - 0.5) <= 0.1  # interleaved: a prefix holds both near their weights
    assert np.array_equal(index, mixture_index([10, 90], [50, 50], seed=0))
    assert not np.array_equal(index, mixture_index([10, 90], [50, 50], seed=1))


def test_each_epoch_draws_on_so_a_downsampled_source_serves_all_its_blocks() -> None:
    blocks, counts = [10, 90], [50, 50]  # the second source gives 50 of its 90 blocks an epoch
    epochs = [mixture_index(blocks, counts, seed=0, epoch=e) for e in range(2)]
    code = [e[e >= 10] for e in epochs]
    assert len(set(code[0].tolist())) == 50 and set(code[0].tolist()) | set(code[1].tolist()) == set(
        range(10, 100)
    )
    assert all((e < 10).sum() == 50 for e in epochs)  # the shares hold every epoch
    # the order is a function of the seed and the epoch alone
    assert np.array_equal(epochs[1], mixture_index(blocks, counts, seed=0, epoch=1))


def test_the_mixed_order_serves_the_same_rows_on_one_rank_or_two() -> None:
    from lightning_order.data.lm.mixture import MixedOrder

    one = MixedOrder(100, 4, 1, 0, seed=3, blocks=(10, 90), counts=(50, 50))
    two = [MixedOrder(100, 2, 2, r, seed=3, blocks=(10, 90), counts=(50, 50)) for r in range(2)]
    for epoch in (0, 1):
        whole = one.rank_indices(epoch).reshape(-1, 4)
        halves = np.concatenate([t.rank_indices(epoch).reshape(-1, 2) for t in two], axis=1)
        assert np.array_equal(whole, halves)
        assert np.array_equal(one.rank_indices(epoch, start=40), one.rank_indices(epoch)[40:])
    assert one.digest(0) != one.digest(1) and one.shares(0) == [0.5, 0.5]


def test_audit_shows_the_mixture_and_judges_it(mixed: OrderedLMDataModule) -> None:
    import io

    from rich.console import Console

    from lightning_order.cli import audit
    from lightning_order.cli.auditing import AUDIT_OK

    buffer = io.StringIO()
    code = audit(mixed.cache_path, console=Console(file=buffer, width=400, soft_wrap=True))
    line = next(row for row in buffer.getvalue().splitlines() if row.startswith("mixture: "))
    assert code == AUDIT_OK and "no violation" in buffer.getvalue()
    assert line.startswith("mixture: web: weight 0.700, drawn 0.700 of the train tokens (")
    assert "code: weight 0.300, drawn 0.300 of the train tokens" in line and line.endswith(
        "(tolerance ±1 points)"
    )


def test_a_yaml_list_of_sources_instantiates_through_the_cli(corpus: Path, tmp_path: Path) -> None:
    import yaml

    from lightning_order.cli import OrderCLI, spec_of_command

    config = {
        "trainer": {"accelerator": "cpu", "devices": 1, "max_steps": 1, "default_root_dir": str(tmp_path)},
        "model": {
            "class_path": "lightning_order.OrderedCausalLM",
            "init_args": {"n_layer": 1, "n_head": 2, "n_embd": 16},
        },
        "data": {
            "sources": [
                {"path": str(corpus / "web" / "docs.txt"), "weight": 0.7, "name": "web"},
                {"path": str(corpus / "code" / "docs.txt"), "weight": 0.3, "name": "code"},
            ],
            "sample_by": "paragraph",
            "vocab_size": 300,
            "block_size": 16,
            "num_proc": 1,
            "cache_dir": str(tmp_path / "cache"),
        },
    }
    path = tmp_path / "mixture.yaml"
    path.write_text(yaml.safe_dump(config))
    cli = OrderCLI(
        args=["--config", str(path)], run=False, pipeline=spec_of_command(["--config", str(path)])
    )
    sources = cli.datamodule.config.sources
    assert [(s.name, s.weight) for s in sources] == [("web", 0.7), ("code", 0.3)]
    assert cli.model.hparams["vocab_size"] == cli.datamodule.dims["vocab_size"]
    assert cli.datamodule.ledger.latest("pack").stats["mixture"]["sources"] == ["web", "code"]


def test_a_mixture_cleaned_again_after_the_split_is_refused_by_pack(corpus: Path, tmp_path: Path) -> None:
    order = ["load", "split", "clean", "dedup", "build_vocab", "encode", "pack", "shard"]
    dm = mixture_dm(corpus, tmp_path, order=order, enforce=False)
    with pytest.raises(DataError, match="a mixture packs per source") as err:
        dm.prepare_data()
    assert err.value.step == "pack" and "mandated order" in str(err.value)


def test_a_source_too_small_for_one_block_is_mixture_off_weight(tmp_path: Path) -> None:
    from lightning_order.pipelines import spec_for

    write_sources(tmp_path / "data")
    (tmp_path / "data" / "code" / "docs.txt").write_text("def f\n")  # 3 tokens and an end-of-text: no block
    dm = mixture_dm(tmp_path / "data", tmp_path / "cache")
    dm.setup("fit")
    assert dm.ledger.latest("pack").stats["mixture"]["drawn_blocks"][1] == 0
    [violation] = spec_for(ledger=dm.ledger).check(dm.ledger)
    assert violation.rule == "mixture-off-weight" and violation.details["sources"] == ["web", "code"]
    assert "source 'code': weight 30.00%, realised 0.00%" in violation.message


def _mixed(size: int = 1000, batch: int = 8, world: int = 1, rank: int = 0, **kwargs: Any) -> Any:
    """A MixedOrder of three sources (upsampled, downsampled, at par) of ``size`` blocks in all."""
    from lightning_order.data.lm.mixture import MixedOrder

    blocks = (size // 10, size // 2, size - size // 10 - size // 2)
    options = {
        "seed": 7,
        "blocks": blocks,
        "counts": tuple(mixture_counts(blocks, [0.3, 0.3, 0.4])),
        **kwargs,
    }
    return MixedOrder(size, batch, world, rank, **options)


def test_a_mixed_order_holds_a_batch_of_positions_never_the_epochs_draw_at_10m_blocks() -> None:
    import tracemalloc

    order = _mixed(10_000_000, batch=8, world=8, rank=3)
    tracemalloc.start()
    try:
        chunk = next(order.rank_chunks(1, start=4_000_000))  # a loader's read, mid-epoch
        digest, shares = order.digest(1), order.shares(1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20  # a batch of 8 192 positions at a few arrays; the draw would be 80 MB
    assert len(chunk) == 8192 and chunk.max() < 10_000_000 and len(digest) == 16
    assert sum(shares) == pytest.approx(1.0)


def test_a_mixed_order_reads_the_whole_draw_through_the_global_order() -> None:
    from lightning_order.positions import epoch_order

    order = _mixed()
    for epoch in (0, 3):
        whole = order.order_at(epoch, np.arange(1000))
        assert np.array_equal(whole, order.draw(epoch)[epoch_order(1000, 7, epoch)])
        owner = np.searchsorted(np.cumsum(order.blocks), whole, side="right")
        assert np.bincount(owner, minlength=3).tolist() == list(order.counts)  # each source its count
    unshuffled = _mixed(shuffle=False)
    assert np.array_equal(unshuffled.order_at(0, np.arange(1000)), unshuffled.draw(0))


@pytest.mark.parametrize("world", [2, 4, 8])
def test_a_mixed_order_is_the_same_on_any_number_of_ranks_and_its_ranks_partition_the_positions(
    world: int,
) -> None:
    one = _mixed(batch=8 * world)
    ranks = [_mixed(batch=8, world=world, rank=r) for r in range(world)]
    for epoch in (0, 1):
        side_by_side = np.concatenate([r.rank_indices(epoch).reshape(-1, 8) for r in ranks], axis=1)
        # the ranks' reads laid side by side are every position of the epoch once, in order
        assert np.array_equal(side_by_side.ravel(), one.order_at(epoch, np.arange(one.epoch_samples)))
        assert np.array_equal(side_by_side.ravel(), one.rank_indices(epoch))
        assert len({r.digest(epoch) for r in ranks} | {one.digest(epoch)}) == 1
        assert all(r.shares(epoch) == one.shares(epoch) for r in ranks)


def test_a_mixed_order_is_a_function_of_the_seed_and_the_epoch_alone() -> None:
    order = _mixed()
    assert np.array_equal(order.rank_indices(2), _mixed().rank_indices(2))
    assert order.digest(2) == _mixed().digest(2)
    assert not np.array_equal(order.rank_indices(0), order.rank_indices(1))
    assert not np.array_equal(order.rank_indices(0), _mixed(seed=8).rank_indices(0))


def test_the_digest_of_a_mixed_order_changes_with_its_draw() -> None:
    from lightning_order.positions import GlobalOrder

    order = _mixed()
    blocks = order.blocks
    others = [
        _mixed(seed=8),
        _mixed(shuffle=False),
        _mixed(blocks=(blocks[0] + 1, blocks[1] - 1, blocks[2])),
        _mixed(counts=tuple(mixture_counts(blocks, [0.4, 0.3, 0.3]))),
    ]
    digests = {order.digest(0), order.digest(1), *(o.digest(0) for o in others)}
    assert len(digests) == 6 and GlobalOrder(1000, 8, seed=7).digest(0) not in digests


def test_a_mixed_orders_shares_are_those_of_the_blocks_its_epoch_serves() -> None:
    order = _mixed(batch=48)  # 1000 blocks: 20 global batches served, 40 blocks dropped
    assert order.dropped == 40
    for epoch in (0, 1):
        owner = np.searchsorted(np.cumsum(order.blocks), order.rank_indices(epoch), side="right")
        served = np.bincount(owner, minlength=3) / order.epoch_samples
        assert order.shares(epoch) == pytest.approx(served.tolist(), abs=1e-12)


def test_a_mixed_order_whose_counts_do_not_draw_its_size_is_refused() -> None:
    with pytest.raises(ValueError, match=r"draws size=1000 blocks, got counts \[500, 400\] \(sum 900\)"):
        _mixed(blocks=(500, 500), counts=(500, 400))


def test_weights_7_3_and_07_03_share_the_cache_the_blocks_and_the_resume(
    corpus: Path, mixed: OrderedLMDataModule
) -> None:
    """Issue #42 item 7: the same blocks and order, yet the raw weights were keyed (prepare again, resume refused)."""
    from lightning_order.checks.resume import check_resume

    scaled = mixture_dm(corpus, mixed.config.cache_dir, weights=(7, 3))
    assert scaled.cache_key == mixed.cache_key
    assert [s.weight for s in scaled.config.sources] == [0.7, 0.3]  # the weights as shares
    scaled.setup("fit")  # the prepared cache of 0.7 / 0.3, taken as it is
    assert np.array_equal(scaled.blocks("train"), mixed.blocks("train"))
    assert check_resume(mixed.data_fingerprints(), scaled.data_fingerprints()) == []
    # shares that differ only past float precision are one mixture; a real change is another
    thirds = mixture_dm(corpus, mixed.config.cache_dir, weights=(1 / 3, 2 / 3))
    assert mixture_dm(corpus, mixed.config.cache_dir, weights=(0.1, 0.2)).cache_key == thirds.cache_key
    assert mixture_dm(corpus, mixed.config.cache_dir, weights=(0.71, 0.29)).cache_key != mixed.cache_key


@pytest.mark.parametrize(
    ("weights", "needle"),
    [
        ((1e308, 1e308), None),  # huge but equal: the shares are 0.5 / 0.5
        ((1e308, 1.0), "source 1 \\('code'\\)"),  # a share below 1e-9 of the largest: refused, named
        ((1.0, 1e-300), "source 1 \\('code'\\)"),
        ((float("inf"), 1.0), "source 0 \\('web'\\)"),
        ((float("nan"), 1.0), "source 0 \\('web'\\)"),
    ],
)
def test_weights_that_cannot_be_drawn_are_refused_at_construction_naming_the_source(
    corpus: Path, tmp_path: Path, weights: tuple[float, float], needle: str | None
) -> None:
    """Issue #42 item 7: weights of 1e308 passed the check, then ``pack`` raised a raw ``ValueError`` (NaN shares)."""
    if needle is None:
        dm = mixture_dm(corpus, tmp_path, weights=weights)
        assert [s.weight for s in dm.config.sources] == [0.5, 0.5]
        assert mixture_counts([40, 60], [s.weight for s in dm.config.sources]) == [50, 50]
        return
    with pytest.raises(DataError, match=needle) as err:
        mixture_dm(corpus, tmp_path, weights=weights)
    assert err.value.step == "load" and "\n" not in str(err.value) and "weight" in str(err.value)


@pytest.mark.parametrize("weight", [np.float32(0.7), np.float64(0.7), np.int64(7)], ids=repr)
def test_a_numpy_scalar_weight_is_a_number(corpus: Path, tmp_path: Path, weight: Any) -> None:
    """Issue #42 item 7: ``np.float32(0.7)`` "must be a positive number"."""
    sources = [
        LMSource(path=str(corpus / "web" / "docs.txt"), weight=weight, name="web"),
        LMSource(path=str(corpus / "code" / "docs.txt"), weight=weight * 3 / 7, name="code"),
    ]
    cfg = LMConfig(sources=sources)
    assert [type(s.weight) for s in cfg.sources] == [float, float]
    assert [s.weight for s in cfg.sources] == pytest.approx([0.7, 0.3], abs=1e-6)


def test_a_text_source_and_a_json_source_with_its_own_column_mix(corpus: Path, tmp_path: Path) -> None:
    """Issue #42 item 7: ``text_column="content"`` broke the text source, and the error named no source."""
    import json

    code = tmp_path / "code.jsonl"
    lines = (corpus / "code" / "docs.txt").read_text().split("\n\n")
    code.write_text("".join(json.dumps({"content": doc, "id": i}) + "\n" for i, doc in enumerate(lines)))
    web = str(corpus / "web" / "docs.txt")
    options = {"cache_dir": str(tmp_path / "c"), "vocab_size": 300, "block_size": 16, "num_proc": 1}
    options["sample_by"] = "paragraph"
    # the case: text_column="content" for the JSON source; the text builder's column stays "text"
    dm = OrderedLMDataModule(
        sources=[
            LMSource(path=web, weight=0.7, name="web"),
            LMSource(path=str(code), weight=0.3, name="code", dataset="json"),
        ],
        text_column="content",
        **options,
    )
    dm.prepare_data()
    assert dm.ledger.latest("load").stats["source_rows"] == [200, len(lines)]
    # the column enters the cache key: another column of the same file is another corpus
    other = LMSource(path=str(code), weight=0.3, name="code", dataset="json", text_column="id")
    again = OrderedLMDataModule(sources=[LMSource(path=web, weight=0.7, name="web"), other], **options)
    assert again.cache_key != dm.cache_key
    # a column the source's file lacks names the source and the field to set
    missing = LMSource(path=str(code), weight=0.3, name="code", dataset="json", text_column="body")
    bad = OrderedLMDataModule(sources=[LMSource(path=web, weight=0.7, name="web"), missing], **options)
    with pytest.raises(DataError, match="source 1 \\('code'\\)") as err:
        bad.prepare_data()
    assert "text_column" in str(err.value) and err.value.step == "load"
    # the text builder's column is "text": another one is refused at construction, naming the source
    with pytest.raises(DataError, match=r"source 0 \(.web.\).*text_column"):
        LMConfig(sources=[LMSource(path=web, weight=1.0, name="web", text_column="content")])
