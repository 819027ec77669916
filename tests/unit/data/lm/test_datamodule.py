"""OrderedLMDataModule: the default ledger, dedup before the split, end-of-text per block, shifted labels, dims.

The keywords, loaders and cache it shares with OrderedDataModule: tests/unit/data/engine/test_datamodule_contract.py.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from lightning_order import LM_PIPELINE, OrderedCausalLM, OrderedLMDataModule, OrderError
from lightning_order.data.lm.artefacts import read_blocks
from lightning_order.data.lm.blocks import encode_documents, stride_shard
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.datamodule import LM_DATA_STEPS
from lightning_order.data.lm.steps import clean_document
from lightning_order.pipelines import PIPELINES

SMALL = {"max_documents": 300, "vocab_size": 400, "block_size": 32, "batch_size": 8}


@pytest.fixture(scope="module")
def dm(tmp_path_factory: pytest.TempPathFactory) -> OrderedLMDataModule:
    module = OrderedLMDataModule(**SMALL, cache_dir=str(tmp_path_factory.mktemp("lmcache")))
    module.prepare_data()
    module.setup("fit")
    return module


def _words_ngrams(text: str, n: int = 5) -> set[tuple[str, ...]]:
    words = text.lower().split()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def planted_corpus(path: Path, pairs: int = 40) -> Path:
    """Real documents, then a near-duplicate (one word changed) of ``pairs`` of the long ones, as JSON lines."""
    docs = [d for d in stdlib_corpus(400) if len(d.split()) >= 120][:120]
    rng = random.Random(0)
    variants = []
    for doc in docs[:pairs]:
        words = doc.split(" ")
        i = rng.randrange(len(words) // 3, 2 * len(words) // 3)
        words[i] = words[i] + "x"
        variants.append(" ".join(words))
    with path.open("w") as handle:
        for text in [*docs, *variants]:
            handle.write(json.dumps({"text": text}) + "\n")
    return path


def test_the_data_steps_are_the_pipelines() -> None:
    assert LM_DATA_STEPS == ("load", "clean", "dedup", "split", "build_vocab", "encode", "pack", "shard")
    assert LM_PIPELINE.order()[-4:] == ["init_model", "configure_optimizers", "train", "evaluate"]


def test_default_ledger_passes_the_lm_pipeline(dm: OrderedLMDataModule) -> None:
    assert [r.step for r in dm.ledger] == list(LM_DATA_STEPS)
    assert LM_PIPELINE.check(dm.ledger) == []
    assert PIPELINES["lm"].check(dm.ledger) == []
    dedup = dm.ledger.latest("dedup")
    assert dedup.stats["exact_removed"] > 0  # the stdlib docs repeat inherited docstrings
    assert {"exact_removed", "near_removed"} <= set(dedup.stats)
    assert dm.ledger.latest("load").params["corpus"] == dm.data_fingerprints()["corpus"]


def test_dims_build_the_model(dm: OrderedLMDataModule) -> None:
    dims = dm.dims
    assert set(dims) == {"vocab_size", "padded_vocab_size", "block_size"}
    assert dims["vocab_size"] == dm.tokenizer.get_vocab_size()
    assert dims["padded_vocab_size"] % 64 == 0 and 0 <= dims["padded_vocab_size"] - dims["vocab_size"] < 64
    assert dims["block_size"] == SMALL["block_size"]
    model = OrderedCausalLM(**dims, n_layer=1, n_embd=32)
    assert model.token_embedding.num_embeddings == dims["padded_vocab_size"]
    assert dm.tokenizer.token_to_id("<|endoftext|>") == dm.eos_token_id == 0


def test_batches_are_long_and_labels_are_inputs_shifted_by_one(dm: OrderedLMDataModule) -> None:
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"input_ids", "labels"}
    assert batch["input_ids"].dtype == batch["labels"].dtype == __import__("torch").long
    assert tuple(batch["input_ids"].shape) == (SMALL["batch_size"], SMALL["block_size"])
    assert (batch["labels"][:, :-1] == batch["input_ids"][:, 1:]).all()
    stored = {tuple(row) for row in np.asarray(read_blocks(dm.cache_path)["train"]).tolist()}
    for inputs, labels in zip(batch["input_ids"].tolist(), batch["labels"].tolist()):
        assert tuple([*inputs, labels[-1]]) in stored  # each row is one stored block of block_size + 1


def test_hf_batches_hold_unshifted_labels_and_an_attention_mask(dm: OrderedLMDataModule) -> None:
    """``batch_format="hf"``: the same rows' inputs, labels equal to them (the model shifts), a mask of ones."""
    torch = __import__("torch")
    shifted = next(iter(dm.train_dataloader()))
    hf = OrderedLMDataModule(**SMALL, cache_dir=dm.cache_dir, batch_format="hf")
    hf.setup("fit")  # no trainer: the requested format, recorded with no model
    assert hf.batch_format == "hf"
    assert hf.ledger.info["batch_format"] == {"format": "hf", "requested": "hf", "model": None}
    batch = next(iter(hf.train_dataloader()))
    assert set(batch) == {"input_ids", "labels", "attention_mask"}
    assert torch.equal(batch["input_ids"], shifted["input_ids"])
    assert torch.equal(batch["labels"], batch["input_ids"]) and batch["labels"].dtype == torch.long
    assert batch["attention_mask"].dtype == torch.long and bool(batch["attention_mask"].all())
    val = next(iter(hf.val_dataloader()))
    assert torch.equal(val["labels"], val["input_ids"]) and "attention_mask" in val


@pytest.mark.parametrize("batch_format", ["shifted", "hf"])
def test_document_attention_adds_per_document_positions(dm: OrderedLMDataModule, batch_format: str) -> None:
    """The same rows and labels as without the option, and ``position_ids`` restarting after each end-of-text;
    the ``"hf"`` form drops the all-ones mask (transformers reads packed positions only without one)."""
    torch = __import__("torch")
    plain = OrderedLMDataModule(**SMALL, cache_dir=dm.cache_dir, batch_format=batch_format)
    plain.setup("fit")
    docs = OrderedLMDataModule(
        **SMALL, cache_dir=dm.cache_dir, batch_format=batch_format, document_attention=True
    )
    docs.setup("fit")
    assert docs.cache_path == plain.cache_path  # the same prepared blocks
    assert docs.ledger.info["document_attention"] is True and plain.ledger.info["document_attention"] is False
    boundaries = 0
    for loader in ("train_dataloader", "val_dataloader"):
        for before, after, _ in zip(getattr(plain, loader)(), getattr(docs, loader)(), range(10)):
            assert set(after) == {"input_ids", "labels", "position_ids"}
            assert torch.equal(after["input_ids"], before["input_ids"])
            assert torch.equal(after["labels"], before["labels"])
            ids, positions = after["input_ids"], after["position_ids"]
            assert positions.dtype == torch.long and (positions[:, 0] == 0).all()
            after_eos = ids[:, :-1] == docs.eos_token_id
            boundaries += int(after_eos.sum())
            assert (positions[:, 1:][after_eos] == 0).all()
            assert (positions[:, 1:][~after_eos] == positions[:, :-1][~after_eos] + 1).all()
    assert boundaries > 0  # the batches compared hold document boundaries


def test_without_document_attention_batches_are_unchanged(dm: OrderedLMDataModule) -> None:
    """Off (the default): today's keys and values, bit for bit, from the stored blocks."""
    torch = __import__("torch")
    assert dm.config.document_attention is False and dm.ledger.info["document_attention"] is False
    batch = next(iter(dm.val_dataloader()))
    blocks = torch.from_numpy(np.asarray(dm.blocks("val")[: len(batch["input_ids"])], dtype=np.int64))
    assert set(batch) == {"input_ids", "labels"}
    assert torch.equal(batch["input_ids"], blocks[:, :-1]) and torch.equal(batch["labels"], blocks[:, 1:])


def test_auto_batch_format_without_a_transformers_model_is_shifted(dm: OrderedLMDataModule) -> None:
    assert dm.config.batch_format == "auto" and dm.batch_format == "shifted"
    assert dm.ledger.info["batch_format"] == {"format": "shifted", "requested": "auto", "model": None}


def test_every_block_holds_one_eos_per_document_boundary(dm: OrderedLMDataModule) -> None:
    """Computed independently: each train document encoded alone, its end placed after its tokens.

    The packing rule: each partition's documents (in canonical order) make whole blocks of
    ``block_size + 1``; the partitions' tails, joined in partition order, make the last blocks,
    each tail joined after another from its first document start (issue #42: the rest of a
    document its partition's last block cut is dropped there).
    """
    width = SMALL["block_size"] + 1
    docs = list(dm.documents("train"))
    lengths = [len(dm.tokenizer.encode(d, add_special_tokens=False).ids) + 1 for d in docs]
    eos_per_block: list[int] = []
    tail_ends: list[int] = []
    tail_length, start = 0, 0
    for count in dm.ledger.info["documents"]["train"]:
        ends = np.cumsum(lengths[start : start + count]) - 1
        stream = int(ends[-1]) + 1 if count else 0
        whole = stream // width
        eos_per_block += np.bincount(ends[ends < whole * width] // width, minlength=whole).tolist()
        in_tail = [int(e) - whole * width for e in ends[ends >= whole * width]]
        cut = whole and in_tail and whole * width - 1 not in ends  # the tail opens mid-document
        lead = in_tail[0] + 1 if tail_length and cut else 0
        tail_ends += [tail_length + e - lead for e in in_tail if e >= lead]
        tail_length += stream - whole * width - lead
        start += count
    tail_ends_arr = np.asarray(tail_ends, dtype=np.int64)
    tails = tail_length // width
    eos_per_block += np.bincount(
        tail_ends_arr[tail_ends_arr < tails * width] // width, minlength=tails
    ).tolist()
    blocks = np.asarray(read_blocks(dm.cache_path)["train"])
    assert len(blocks) == len(eos_per_block)
    assert ((blocks == dm.eos_token_id).sum(axis=1) == np.asarray(eos_per_block)).all()
    # The recorded count (summed from the workers that packed each partition) is the blocks' own.
    assert dm.ledger.latest("pack").stats["train_eos_tokens"] == sum(eos_per_block)


def test_no_near_duplicate_straddles_the_split_exactly_on_a_sample(tmp_path: Path) -> None:
    data = planted_corpus(tmp_path / "docs.jsonl")
    planted = dict(
        dataset="json",
        data_files=str(data),
        val_fraction=0.2,
        vocab_size=400,
        block_size=32,
        cache_dir=str(tmp_path / "cache"),
    )
    module = OrderedLMDataModule(**planted)
    module.prepare_data()
    assert module.ledger.latest("dedup").stats["near_removed"] >= 35  # the planted variants were found
    train, val = module.documents("train"), module.documents("val")
    rng = random.Random(1)
    sample = rng.sample(range(len(train)), min(60, len(train)))
    grams_val = [_words_ngrams(v) for v in val]
    worst = max(_jaccard(_words_ngrams(train[i]), g) for i in sample for g in grams_val)
    assert worst < 0.8
    # The same corpus deduplicated after the split (a wrong order) leaves planted pairs straddling it.
    wrong = OrderedLMDataModule(
        **planted,
        order="load, clean, split, dedup, build_vocab, encode, pack, shard",
        enforce=False,
    )
    wrong.prepare_data()
    straddling = wrong.ledger.latest("dedup").stats["straddling"]
    assert straddling > 0
    rules = {v.rule for v in PIPELINES["lm"].check(wrong.ledger)}
    assert rules == {"dedup-after-split"}
    val_w = wrong.documents("val")
    pairs = [
        (t, v)
        for t in wrong.documents("train")
        for v in val_w
        if _jaccard(_words_ngrams(t), _words_ngrams(v)) >= 0.8
    ]
    assert len(pairs) == straddling  # the recorded count is the exact one


def test_dedup_after_split_is_refused_at_construction(tmp_path: Path) -> None:
    with pytest.raises(OrderError) as err:
        OrderedLMDataModule(
            order="load, clean, split, dedup, build_vocab, encode, pack, shard", cache_dir=str(tmp_path)
        )
    assert err.value.rules == ["dedup-after-split"]


def test_pack_without_eos_refused_then_recorded(tmp_path: Path) -> None:
    with pytest.raises(OrderError) as err:
        OrderedLMDataModule(**SMALL, eos=False, cache_dir=str(tmp_path))
    assert err.value.rules == ["pack-without-eos"]
    wrong = OrderedLMDataModule(**SMALL, eos=False, enforce=False, cache_dir=str(tmp_path))
    blocks = np.asarray(read_blocks(wrong.cache_path)["train"]) if wrong.dims else None
    assert (blocks == wrong.eos_token_id).sum() == 0
    assert [v.rule for v in PIPELINES["lm"].check(wrong.ledger)] == ["pack-without-eos"]


def test_clean_keeps_lines_and_removes_the_eos_marker() -> None:
    assert clean_document("a  \r\nb<|endoftext|>c\n\n\n\nd\x00") == "a\nb c\n\nd"
    # Every C0 control character but tab, newline (and carriage return, a line end) is dropped, and
    # DEL; nothing else is (C1 controls and Unicode line separators are text).
    dropped = "".join(chr(c) for c in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
    kept = "\t\x80\x85\u2028é"
    assert clean_document("x" + dropped + kept + "y") == "x" + kept + "y"
    assert clean_document(" \n\t ") == ""


def test_encode_ends_every_document_with_eos(dm: OrderedLMDataModule) -> None:
    stream = encode_documents(dm.tokenizer, ["def f(x): return x", "Return the value."], eos_id=0)
    assert (stream.ids == 0).sum() == 2 and stream.ids[stream.ends].tolist() == [0, 0]


@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_strided_shards_are_equal_and_disjoint(world: int) -> None:
    shards = [stride_shard(10, world, rank)[0] for rank in range(world)]
    assert len({len(s) for s in shards}) == 1
    assert len(set(np.concatenate(shards).tolist())) == sum(map(len, shards)) == (10 // world) * world


def test_audit_judges_an_lm_cache_by_its_own_pipeline(dm: OrderedLMDataModule, capsys) -> None:
    from lightning_order.cli.auditing import audit

    assert audit(dm.cache_path) == 0
    assert "the order is correct" in capsys.readouterr().out


def test_the_tokenizer_trains_deterministically() -> None:
    from lightning_order.data.lm.tokenizer import train_byte_bpe

    docs = stdlib_corpus(150)
    assert train_byte_bpe(docs, 500).to_str() == train_byte_bpe(docs, 500).to_str()


def test_the_bounded_pre_tokenizer_cuts_long_runs(dm: OrderedLMDataModule) -> None:
    pieces = dm.tokenizer.pre_tokenizer.pre_tokenize_str("x" * 250 + " word")
    assert max(len(p) for p, _ in pieces) <= 100
    assert dm.tokenizer.decode(dm.tokenizer.encode("x" * 250 + " word").ids) == "x" * 250 + " word"


def test_document_hashes_are_memory_mapped_not_loaded_whole_per_rank(dm: OrderedLMDataModule) -> None:
    for split in ("train", "val"):
        hashes = dm.key_hashes(split)
        assert isinstance(hashes, np.memmap) and hashes.dtype == np.int64 and not hashes.flags.writeable
        assert len(hashes) == len(dm.documents(split))


# -- validation shared out by data-parallel rank (#35) ---------------------------------------------
def _as_rank(cache: str | None, world: int, rank: int, mesh: bool = False, **kwargs) -> OrderedLMDataModule:
    """A DataModule set up as global rank ``rank`` of ``world`` (with ``mesh``: dp ``world // 2`` × tp 2)."""
    from types import SimpleNamespace

    module = OrderedLMDataModule(**SMALL, cache_dir=cache, **kwargs)
    strategy = SimpleNamespace()
    if mesh:  # what ModelParallelStrategy states: the ranks of one tensor-parallel group share a dp rank
        strategy.distributed_sampler_kwargs = {"num_replicas": world // 2, "rank": rank // 2}
    module.trainer = SimpleNamespace(world_size=world, global_rank=rank, strategy=strategy)
    module.setup("validate")
    return module


def _rows(loader, padding: list | None = None) -> list[list[int]]:
    """The input rows a loader scores; the rows with no target (every label -100) go to ``padding``."""
    rows = []
    for batch in loader:
        scored = (batch["labels"] != -100).any(dim=1).tolist()
        for row, kept in zip(batch["input_ids"].tolist(), scored):
            (rows if kept else padding if padding is not None else []).append(row)
    return rows


@pytest.mark.parametrize("world", [2, 3])
def test_each_data_parallel_rank_validates_on_its_own_share_and_together_on_every_block_once(
    dm: OrderedLMDataModule, world: int
) -> None:
    whole = _rows(dm.val_dataloader())
    assert len(whole) == len(dm.blocks("val"))  # one rank: the whole split, as before
    ranks = [_as_rank(dm.cache_dir, world, rank) for rank in range(world)]
    for loader in ("val_dataloader", "test_dataloader"):
        padding: list = []
        shares = [_rows(getattr(module, loader)(), padding) for module in ranks]
        # in order, disjoint, nothing repeated, nothing left out
        assert [row for share in shares for row in share] == whole
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
        # Every rank runs as many steps: a shorter share ends with a padding block that has no target.
        assert len(padding) == world * max(map(len, shares)) - len(whole)
        assert len({len(getattr(module, loader)()) for module in ranks}) == 1
    assert all(module.ledger.info["shard_validation"] is True for module in ranks)
    assert all(len(module.blocks("val")) == len(whole) for module in ranks)  # every rank holds the split


def test_a_tensor_parallel_group_validates_on_one_share(dm: OrderedLMDataModule) -> None:
    shares = [_rows(_as_rank(dm.cache_dir, 4, rank, mesh=True).val_dataloader()) for rank in range(4)]
    assert shares[0] == shares[1] and shares[2] == shares[3]
    assert shares[0] + shares[2] == _rows(dm.val_dataloader())


def test_shard_validation_false_gives_every_rank_the_whole_split(dm: OrderedLMDataModule) -> None:
    whole = _rows(dm.val_dataloader())
    for rank in range(2):
        module = _as_rank(dm.cache_dir, 2, rank, shard_validation=False)
        assert module.cache_path == dm.cache_path  # serving only: the same prepared blocks
        assert _rows(module.val_dataloader()) == _rows(module.test_dataloader()) == whole
        assert module.ledger.info["shard_validation"] is False


@pytest.mark.filterwarnings("ignore:You are trying to .self.log")
def test_the_merged_val_loss_of_uneven_shares_is_the_one_rank_value(dm: OrderedLMDataModule) -> None:
    """OrderedCausalLM's sum-and-count metric over 3 uneven shares, merged as the ranks' reduction does."""
    import copy

    torch = __import__("torch")
    torch.manual_seed(0)
    model = OrderedCausalLM(**dm.dims, n_layer=1, n_head=2, n_embd=32).eval()

    def scored(loader):
        model.val_loss_metric.reset()
        with torch.no_grad():
            for index, batch in enumerate(loader):
                model.validation_step(batch, index)
        return copy.deepcopy(model.val_loss_metric)

    one = scored(dm.val_dataloader()).compute().item()
    parts = [scored(_as_rank(dm.cache_dir, 3, rank).val_dataloader()) for rank in range(3)]
    assert len({int(part.tokens) for part in parts}) == 2  # uneven shares: a mean of means would drift
    merged = parts[0]
    for other in parts[1:]:
        merged.merge_state(other)
    assert merged.compute().item() == pytest.approx(one, rel=1e-6, abs=1e-6)
