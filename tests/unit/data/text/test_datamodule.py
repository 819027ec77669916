"""OrderedDataModule end to end on small data: order, leakage, cache, bad input, wrong orders.

The keywords, loaders and cache it shares with OrderedLMDataModule: tests/unit/data/engine/test_datamodule_contract.py.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
import xxhash
from orders import WRONG_ORDERS

from lightning_order import STANDARD_PIPELINE, DataError, OrderedDataModule, OrderError
from lightning_order.data.engine.keys import is_val
from lightning_order.data.engine.runner import plan
from lightning_order.data.text import datamodule as dm_module
from lightning_order.data.text import load as load_module
from lightning_order.data.text import prepare as text_prepare
from lightning_order.data.text.demo import DEMO_NUMERIC_COLUMNS, demo_rows
from lightning_order.data.text.normalise import clean_text
from lightning_order.data.text.steps import STEPS
from lightning_order.positions import GlobalOrder, epoch_order

SMALL = {"demo_size": 2000, "vocab_size": 400, "max_length": 32}


def _no_cache_left(root: Path) -> bool:
    return not [p for p in root.iterdir() if p.is_dir()] if root.exists() else True


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    dm = OrderedDataModule(cache_dir=str(tmp_path_factory.mktemp("cache")), batch_size=16, **SMALL)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def _encoded(dm, split):
    return datasets.load_from_disk(str(dm.cache_path / split))


# -- the default run ----------------------------------------------------------------------------
def test_default_ledger_is_clean(prepared):
    assert prepared.ledger.steps() == list(dm_module.DATA_STEPS)
    assert STANDARD_PIPELINE.check(prepared.ledger) == []
    fit = prepared.ledger.latest("fit_features")
    assert fit.fitted_on == prepared.ledger.latest("split").parts["train"]


def test_dims_and_batches(prepared):
    dims = prepared.dims
    assert set(dims) == {"vocab_size", "num_features", "num_classes", "max_length"}
    assert dims["num_features"] == len(DEMO_NUMERIC_COLUMNS) + 4
    assert dims["num_classes"] == 4 and dims["max_length"] == 32
    assert prepared.vocab_size == dims["vocab_size"] == prepared.tokenizer.get_vocab_size()
    batch = next(iter(prepared.train_dataloader()))
    assert set(batch) == {"input_ids", "attention_mask", "features", "labels"}
    assert batch["input_ids"].dtype == torch.long and batch["input_ids"].shape == (16, 32)
    assert batch["attention_mask"].dtype == torch.long and batch["attention_mask"].shape == (16, 32)
    assert batch["features"].dtype == torch.float32 and batch["features"].shape == (16, dims["num_features"])
    assert batch["labels"].dtype == torch.long and batch["labels"].shape == (16,)
    assert int(batch["input_ids"].max()) < dims["vocab_size"]
    assert ((batch["input_ids"] == 0) == (batch["attention_mask"] == 0)).all()  # [PAD] is id 0
    val = next(iter(prepared.val_dataloader()))
    assert val["input_ids"].shape[1] == 32
    total = len(_encoded(prepared, "train"))  # one rank: every whole batch of 16, the rest dropped
    assert prepared.shard_info == {
        "rank": 0,
        "world_size": 1,
        "length": total // 16 * 16,
        "dropped": total % 16,
        "start": 0,  # the first global sample of this data-parallel rank's share
    }


def test_shards_per_rank_without_a_trainer_process(prepared):
    from types import SimpleNamespace

    keys, lengths = [], set()
    for rank in range(3):
        dm = OrderedDataModule(cache_dir=str(prepared.cache_root), batch_size=16, **SMALL)
        dm.trainer = SimpleNamespace(world_size=3, global_rank=rank)
        dm.setup("fit")
        info = dm.shard_info
        assert info["rank"] == rank and info["world_size"] == 3
        lengths.add(info["length"])
        keys.append(dm.key_hashes("train").tolist())
        assert len(dm.key_hashes("val")) == len(_encoded(prepared, "val"))
        assert dm.ledger.latest("shard").rank == rank
        assert len(dm.val_dataloader().dataset) == len(_encoded(prepared, "val"))  # whole on every rank
        assert dm.data_fingerprints() == prepared.data_fingerprints()
    total = len(_encoded(prepared, "train"))
    batches = total // 48  # global batches of 3 ranks × 16
    assert lengths == {batches * 16} and info["dropped"] == total - batches * 48
    # The global order: rank r reads rows [16r, 16r + 16) of every global batch of the epoch's
    # order, so the ranks' parts laid side by side, batch by batch, are the epoch's global batches.
    order = epoch_order(total, seed=0, epoch=0)[: batches * 48].reshape(batches, 3, 16)
    split = np.asarray(_encoded(prepared, "train")["key_hash"])
    for rank in range(3):
        assert keys[rank] == split[order[:, rank].ravel()].tolist()


def test_data_fingerprints(prepared):
    fps = prepared.data_fingerprints()
    assert set(fps) == {"manifest", "split", "statistics", "vocab"}
    assert all(isinstance(v, str) and len(v) == 32 for v in fps.values())
    assert fps["split"] == prepared.ledger.latest("split").output


def _independent_rows():
    """The demo rows, cleaned and featurised here, without the package's step code."""
    rows = []
    for r in demo_rows(SMALL["demo_size"], seed=0):
        text = clean_text(r["text"])
        if not text:
            continue
        words = len(text.split())
        punct = sum(text.count(c) for c in "!?.,;:")
        feats = [r[c] for c in DEMO_NUMERIC_COLUMNS] + [
            len(text),
            words,
            len(text) / words,
            math.log1p(punct),
        ]
        rows.append((text, feats))
    return rows


def test_statistics_fitted_on_exactly_the_train_rows(prepared):
    train_keys = set(_encoded(prepared, "train")["key_hash"])
    rows = _independent_rows()
    # The split key of a text is its word sequence (see lightning_order.data.text.split), redone here.
    words = [" ".join(re.findall(r"\w+", t.lower())) for t, _ in rows]
    key = [np.uint64(xxhash.xxh3_64_intdigest(w.encode())).astype(np.int64) for w in words]
    feats = np.asarray([f for _, f in rows])
    in_train = np.asarray([int(k) in train_keys for k in key])
    stats = prepared.statistics
    np.testing.assert_allclose(stats["mean"], feats[in_train].mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(stats["std"], feats[in_train].std(axis=0), rtol=1e-9)  # ddof=0, like sklearn
    assert stats["count"] == in_train.sum() == len(_encoded(prepared, "train"))
    assert not np.allclose(stats["mean"], feats.mean(axis=0), rtol=1e-6)  # whole-data statistics differ
    standardised = np.asarray(_encoded(prepared, "train")["features"])
    np.testing.assert_allclose(standardised.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(standardised.std(axis=0), 1, atol=1e-4)


def test_no_cleaned_text_in_both_splits(prepared):
    train, val = _encoded(prepared, "train"), _encoded(prepared, "val")
    assert not set(train["key_hash"]) & set(val["key_hash"])
    decoded_train = {prepared.tokenizer.decode(ids) for ids in train["input_ids"][:300]}
    decoded_val = {prepared.tokenizer.decode(ids) for ids in val["input_ids"]}
    assert len(decoded_val) > 10 and not decoded_train & decoded_val


def test_vocab_holds_no_markup_or_stray_markers(prepared):
    vocab = prepared.tokenizer.get_vocab()
    for token in vocab:
        if token.startswith("[") and token.endswith("]"):
            continue
        body = token[2:] if token.startswith("##") and len(token) > 2 else token
        assert not set(body) & set("<>#"), token
        assert body not in {"nbsp", "quot", "amp", "div", "br", "class"}, token
        assert not any(ord(c) > 0xFF00 for c in body), token


# -- cache -------------------------------------------------------------------------------------
@pytest.fixture
def preparations(monkeypatch):
    """The demo corpora generated from now on: one per preparation of demo data (the load step)."""
    calls = []
    real = load_module.make_demo_corpus

    def counting(*args, **kwargs):
        calls.append(kwargs.get("seed"))
        return real(*args, **kwargs)

    monkeypatch.setattr(load_module, "make_demo_corpus", counting)
    return calls


def test_cache_reuse_and_invalidation(prepared, preparations, monkeypatch):
    root = prepared.cache_root
    runs = []
    real_run = text_prepare.run_preparation
    monkeypatch.setattr(text_prepare, "run_preparation", lambda *a, **k: runs.append(a) or real_run(*a, **k))
    again = OrderedDataModule(cache_dir=str(root), batch_size=3, num_workers=0, num_proc=2, **SMALL)
    assert again.dims == prepared.dims
    assert runs == []  # a cache hit runs no step: the dims come from the manifest
    assert preparations == [] and again.cache_path == prepared.cache_path
    assert again.data_fingerprints() == prepared.data_fingerprints()
    changed = OrderedDataModule(cache_dir=str(root), **{**SMALL, "vocab_size": 300})
    assert changed.cache_key != prepared.cache_key
    for other in (
        {"seed": 1},
        {"val_fraction": 0.2},
        {"max_length": 16},
        {"tokenizer": "bpe"},
        {"lowercase": False},
    ):
        assert OrderedDataModule(cache_dir=str(root), **{**SMALL, **other}).cache_key != prepared.cache_key
    assert changed.dims["vocab_size"] <= 300
    assert len(preparations) == 1


def test_changed_data_file_prepares_anew(tmp_path):
    path = tmp_path / "d.csv"
    _write_csv(path, _rows(200))
    dm = OrderedDataModule(
        "csv", data_files=str(path), cache_dir=str(tmp_path / "c"), vocab_size=100, max_length=16
    )
    key = dm.cache_key
    dm.prepare_data()
    before = path.stat()
    _write_csv(path, _rows(220))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))  # a later mtime, no sleep
    dm2 = OrderedDataModule(
        "csv", data_files=str(path), cache_dir=str(tmp_path / "c"), vocab_size=100, max_length=16
    )
    assert dm2.cache_key != key
    assert dm2.ledger.latest("load").stats["rows"] == 220


@pytest.mark.parametrize("damage", ["truncate-manifest", "edit-manifest", "delete-arrow", "leftover-temp"])
def test_damaged_cache_is_never_trusted(tmp_path, damage, preparations):
    dm = OrderedDataModule(cache_dir=str(tmp_path), demo_size=600, vocab_size=200, max_length=16)
    dm.prepare_data()
    reference = dm.data_fingerprints()
    path = dm.cache_path
    if damage == "truncate-manifest":
        text = (path / "manifest.json").read_text()
        (path / "manifest.json").write_text(text[: len(text) // 2])
    elif damage == "edit-manifest":
        (path / "manifest.json").write_text(
            (path / "manifest.json").read_text().replace('"rows": 600', '"rows": 601')
        )
    elif damage == "delete-arrow":
        next((path / "train").glob("*.arrow")).unlink()
    else:
        (tmp_path / f".tmp-{dm.cache_key}-1-deadbeef" / "train").mkdir(parents=True)
    before = len(preparations)
    fresh = OrderedDataModule(cache_dir=str(tmp_path), demo_size=600, vocab_size=200, max_length=16)
    fresh.setup("fit")
    assert len(preparations) == before + (damage != "leftover-temp")
    assert fresh.data_fingerprints() == reference
    assert not list(tmp_path.glob(".tmp-*")) or damage == "leftover-temp"


# -- loading files ------------------------------------------------------------------------------
def _rows(n, seed=0):
    return [
        {
            "text": r["text"],
            "label": ["neg", "pos", "mid", "odd"][r["label"]],
            "x": r["score"],
            "y": r["amount"],
        }
        for r in demo_rows(n, seed=seed)
    ]


def _write_csv(path, rows):
    import csv

    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _write(path: Path, rows, fmt):
    if fmt == "csv":
        _write_csv(path, rows)
    elif fmt == "json":
        path.write_text("\n".join(json.dumps(r) for r in rows))
    else:
        datasets.Dataset.from_list(rows).to_parquet(str(path))


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_loads_files(tmp_path, fmt):
    path = tmp_path / f"data.{fmt}"
    _write(path, _rows(300), fmt)
    dm = OrderedDataModule(
        fmt,
        data_files=str(path),
        numeric_columns=["x", "y"],
        cache_dir=str(tmp_path / "c"),
        vocab_size=150,
        max_length=16,
    )
    assert dm.dims["num_features"] == 2 + 4 and dm.dims["num_classes"] == 4
    dm.setup("fit")
    assert STANDARD_PIPELINE.check(dm.ledger) == []
    assert dm.ledger.info["label_names"] == ["mid", "neg", "odd", "pos"]
    assert next(iter(dm.train_dataloader()))["labels"].max() < 4


def test_group_column_keeps_groups_together(tmp_path):
    rows = [{**r, "user": i % 40} for i, r in enumerate(_rows(400))]
    path = tmp_path / "g.json"
    _write(path, rows, "json")
    dm = OrderedDataModule(
        "json",
        data_files=str(path),
        group_column="user",
        cache_dir=str(tmp_path / "c"),
        vocab_size=150,
        max_length=16,
    )
    dm.prepare_data()
    train, val = _encoded(dm, "train"), _encoded(dm, "val")
    assert len(set(val["key_hash"])) >= 1 and not set(train["key_hash"]) & set(val["key_hash"])
    assert len(set(train["key_hash"]) | set(val["key_hash"])) == 40


# -- bad input ----------------------------------------------------------------------------------
def _label_only_in_val():
    rows = _rows(300)
    val_rows = [i for i, r in enumerate(rows) if is_val([clean_text(r["text"])], 0.1, 0, text=True)[0]]
    rows[val_rows[0]]["label"] = "rare"
    return rows


BAD_FILES = {
    "missing-column": (lambda: [{"body": "a", "label": 1}] * 20, {}, "load", "text"),
    "missing-numeric": (lambda: _rows(50), {"numeric_columns": ["x", "nope"]}, "load", "nope"),
    "empty-dataset": (lambda: [], {}, "load", None),
    "all-markup": (
        lambda: [{"text": "<b></b> &nbsp;", "label": i % 2} for i in range(50)],
        {},
        "clean",
        "text",
    ),
    "empty-val": (lambda: _rows(3), {"val_fraction": 0.01}, "split", None),
    "nan": (
        lambda: [{**r, "x": float("nan") if i == 7 else r["x"]} for i, r in enumerate(_rows(50))],
        {"numeric_columns": ["x"]},
        "engineer_features",
        "x",
    ),
    "inf": (
        lambda: [{**r, "x": 1e400 if i == 7 else r["x"]} for i, r in enumerate(_rows(50))],
        {"numeric_columns": ["x"]},
        "engineer_features",
        "x",
    ),
    "constant": (
        lambda: [{**r, "x": 3.0} for r in _rows(100)],
        {"numeric_columns": ["x", "y"]},
        "fit_features",
        "x",
    ),
    "int-text": (lambda: [{"text": i, "label": i % 2} for i in range(50)], {}, "load", "text"),
    "null-text": (
        lambda: [{"text": None if i == 3 else "some text", "label": i % 2} for i in range(50)],
        {},
        "clean",
        "text",
    ),
    "label-only-in-val": (_label_only_in_val, {}, "split", "label"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_input_names_step_and_column_and_leaves_no_cache(tmp_path, case):
    make_rows, kwargs, step, column = BAD_FILES[case]
    rows = make_rows()
    path = tmp_path / "data.json"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    root = tmp_path / "cache"
    dm = OrderedDataModule(
        "json", data_files=str(path), cache_dir=str(root), vocab_size=100, max_length=8, **kwargs
    )
    with pytest.raises(DataError) as info:
        dm.prepare_data()
    assert info.value.step == step
    if column is not None:
        assert info.value.column == column
    assert _no_cache_left(root)


@pytest.mark.parametrize(
    ("kwargs", "step"),
    [
        ({"val_fraction": 0.0}, "split"),
        ({"val_fraction": 1.0}, "split"),
        ({"val_fraction": -0.2}, "split"),
        ({"val_fraction": 1.5}, "split"),
        ({"vocab_size": 4}, "build_vocab"),
        ({"tokenizer": "sentencepiece"}, "build_vocab"),
        ({"max_length": 0}, "encode"),
    ],
)
def test_bad_config_fails_at_construction(tmp_path, kwargs, step):
    with pytest.raises(DataError) as info:
        OrderedDataModule(cache_dir=str(tmp_path), **kwargs)
    assert info.value.step == step
    assert _no_cache_left(tmp_path)


# -- order= and enforce= -----------------------------------------------------------------------
@pytest.mark.parametrize("rule", list(WRONG_ORDERS))
def test_wrong_order_is_refused_at_construction(tmp_path, rule):
    with pytest.raises(OrderError) as info:
        OrderedDataModule(cache_dir=str(tmp_path), order=WRONG_ORDERS[rule], **SMALL)
    assert rule in info.value.rules
    assert _no_cache_left(tmp_path)


def _lineage(ledger):
    """Each record's step, its inputs' producers and whether it learned from data (fingerprints are placeholders)."""
    return [(r.step, sorted(r.inputs), r.fitted_on is not None) for r in ledger]


def test_the_planned_ledger_has_the_lineage_of_the_real_one(prepared):
    assert _lineage(plan(prepared.order, STEPS, prepared.config)) == _lineage(prepared.ledger)


@pytest.mark.parametrize("rule", list(WRONG_ORDERS))
def test_wrong_order_runs_with_enforce_false_and_the_ledger_tells(tmp_path, rule):
    dm = OrderedDataModule(
        cache_dir=str(tmp_path),
        order=WRONG_ORDERS[rule],
        enforce=False,
        demo_size=1000,
        vocab_size=300,
        max_length=16,
    )
    dm.setup("fit")
    assert dm.ledger.steps() == WRONG_ORDERS[rule]  # what really ran, in that order
    assert rule in {v.rule for v in STANDARD_PIPELINE.check(dm.ledger)}
    # The plan judged at construction comes from the same runner: same lineage, same verdict.
    planned = plan(dm.order, STEPS, dm.config)
    assert _lineage(planned) == _lineage(dm.ledger)
    assert {v.rule for v in STANDARD_PIPELINE.check(planned)} == {
        v.rule for v in STANDARD_PIPELINE.check(dm.ledger)
    }
    batch = next(iter(dm.train_dataloader()))
    assert batch["features"].shape[1] == dm.num_features


def test_equivalent_order_is_accepted(tmp_path):
    swapped = [
        "load",
        "clean",
        "engineer_features",
        "split",
        "build_vocab",
        "fit_features",
        "encode",
        "shard",
    ]
    dm = OrderedDataModule(cache_dir=str(tmp_path), order=swapped, **SMALL)
    assert dm.order == tuple(swapped)


@pytest.mark.parametrize(
    "order",
    [
        ["clean", "load", "engineer_features", "split", "fit_features", "build_vocab", "encode", "shard"],
        ["load", "clean", "engineer_features", "split", "fit_features", "encode", "build_vocab", "shard"],
        ["load", "clean", "engineer_features", "split", "fit_features", "build_vocab", "encode"],
        ["load", "clean", "tokenize"],
    ],
)
def test_unrunnable_order_is_a_clear_error(tmp_path, order):
    with pytest.raises((ValueError, OrderError)):
        OrderedDataModule(cache_dir=str(tmp_path), order=order, enforce=False, **SMALL)


@pytest.mark.parametrize(
    ("order", "step"),
    [
        (
            ["clean", "load", "engineer_features", "split", "fit_features", "build_vocab", "encode", "shard"],
            "clean",
        ),
        (["load", "clean", "split", "build_vocab", "encode"], "encode"),
        (["load", "clean", "tokenize"], "tokenize"),
        ("load, split, build_vocab, shard, encode", "shard"),
    ],
)
@pytest.mark.parametrize("enforce", [True, False])
def test_unexecutable_order_is_a_data_error_naming_the_step(tmp_path, order, step, enforce):
    # A lightning_order error (the CLI prints it as one line), never a bare ValueError.
    with pytest.raises(DataError, match="cannot be executed") as info:
        OrderedDataModule(cache_dir=str(tmp_path), order=order, enforce=enforce, **SMALL)
    assert info.value.step == step
    assert _no_cache_left(tmp_path)


def test_vocab_before_clean_learns_markup(tmp_path):
    dm = OrderedDataModule(
        cache_dir=str(tmp_path), order=WRONG_ORDERS["vocab-before-clean"], enforce=False, **SMALL
    )
    vocab = dm.tokenizer.get_vocab()
    assert "<" in vocab or "nbsp" in vocab or any("#" in t[2:] for t in vocab)


def test_split_before_clean_leaks_near_duplicates(tmp_path):
    dm = OrderedDataModule(
        cache_dir=str(tmp_path), order=WRONG_ORDERS["out-of-order"], enforce=False, **SMALL
    )
    dm.prepare_data()
    assert set(_encoded(dm, "train")["key_hash"]) & set(_encoded(dm, "val")["key_hash"])


def test_shard_before_normalize_fits_on_the_shard(tmp_path):
    dm = OrderedDataModule(
        cache_dir=str(tmp_path), order=WRONG_ORDERS["shard-before-normalize"], enforce=False, **SMALL
    )
    dm.setup("fit")
    fit = dm.ledger.latest("fit_features")
    assert fit.fitted_on == dm.ledger.latest("shard").output
    assert dm.data_fingerprints()["statistics"] == fit.output
    raw = np.asarray(_encoded(dm, "train")["features"])
    shard = GlobalOrder(len(raw), batch_size=32).rank_indices(0)  # the rows this rank reads in epoch 0
    np.testing.assert_allclose(dm.statistics["mean"], raw[shard].mean(axis=0), rtol=1e-5)


class _Custom(OrderedDataModule):
    engineered_features = ("n_chars",)

    def clean(self, batch):
        batch = super().clean(batch)
        batch[self.text_column] = [t.replace("the", "") for t in batch[self.text_column]]
        return batch

    def engineer_features(self, batch):
        batch["n_chars"] = [float(len(t)) for t in batch[self.text_column]]
        return batch


def test_subclass_overrides_row_steps(tmp_path):
    base = OrderedDataModule(cache_dir=str(tmp_path), **SMALL)
    dm = _Custom(cache_dir=str(tmp_path), **SMALL)
    assert dm.cache_key != base.cache_key
    assert dm.dims["num_features"] == len(DEMO_NUMERIC_COLUMNS) + 1
    assert "the" not in dm.tokenizer.get_vocab()


def test_constructor_is_a_typed_config_schema(tmp_path):
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(OrderedDataModule, "data")
    cfg = parser.parse_args(
        ["--data.demo_size=700", f"--data.cache_dir={tmp_path}", "--data.order=[load, clean]"]
    )
    assert cfg.data.demo_size == 700 and cfg.data.order == ["load", "clean"]
    help_text = parser.format_help()
    assert "val_fraction" in help_text and "the validation share" in help_text


def test_text_without_punctuation_prepares(tmp_path):
    # The engineered punctuation feature is constant here; the user did not choose it, so it
    # standardises to 0 instead of failing (user numeric columns still fail: "constant" above).
    rows = [{"text": f"word{i % 7} other{i % 3} plain", "label": i % 2} for i in range(200)]
    path = tmp_path / "plain.csv"
    _write_csv(path, rows)
    dm = OrderedDataModule(
        "csv", data_files=str(path), cache_dir=str(tmp_path / "c"), vocab_size=80, max_length=8
    )
    dm.setup("fit")
    punct = dm.feature_names.index("feat_punct")
    assert dm.statistics["std"][punct] == 1.0
    features = next(iter(dm.train_dataloader()))["features"]
    assert torch.isfinite(features).all()


def test_test_and_predict_dataloaders_serve_the_validation_split(prepared):
    dm = prepared
    dm.setup("test")
    test_rows = sum(len(b["labels"]) for b in dm.test_dataloader())
    val_rows = sum(len(b["labels"]) for b in dm.val_dataloader())
    assert test_rows == val_rows == len(dm.key_hashes("val"))
    assert len(next(iter(dm.predict_dataloader()))["labels"]) > 0


def test_near_duplicates_land_in_one_split(prepared):
    # Near-duplicates that cleaning leaves apart by a stray '&' or '!' share their word sequence;
    # the split key is that sequence, so each group of them sits wholly in train or in val.
    from collections import defaultdict

    from lightning_order.data.engine.keys import key_hashes, text_key
    from lightning_order.data.text.demo import demo_rows
    from lightning_order.data.text.normalise import clean_text

    groups = defaultdict(set)
    for row in demo_rows(SMALL["demo_size"], seed=0):
        cleaned = clean_text(row["text"])
        groups[text_key(cleaned)].add(cleaned)
    near = [key for key, texts in groups.items() if len(texts) > 1]
    assert len(near) >= 5  # the demo corpus really has such near-duplicates
    train = set(_encoded(prepared, "train")["key_hash"])
    val = set(_encoded(prepared, "val")["key_hash"])
    for key in near:
        (hashed,) = key_hashes([key], text=True).tolist()
        assert (hashed in train) != (hashed in val), key
