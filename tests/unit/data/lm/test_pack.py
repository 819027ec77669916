"""``pack`` writes one shard per task and an index: the joined blocks are those of one block file, row for row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models

from lightning_order.data.engine.engines import LocalEngine
from lightning_order.data.engine.runner import DataState, StepContext
from lightning_order.data.lm.block_shards import INDEX_NAME, ShardedBlocks, write_index, write_shard
from lightning_order.data.lm.config import LMConfig
from lightning_order.data.lm.encode import TokenFiles
from lightning_order.data.lm.mixture import LMSource
from lightning_order.data.lm.pack import pack
from lightning_order.errors import DataError
from lightning_order.models.attention import document_positions

WIDTH = 5


def _one_file_layout(streams: list[np.ndarray], sources: int, width: int) -> np.ndarray:
    """The rows one shared block file held (the layout before shards): per source, each file's whole
    blocks in file order, then the source's joined tails cut into blocks (the rest dropped)."""
    per = len(streams) // sources
    rows = []
    for s in range(sources):
        group = streams[s * per : (s + 1) * per]
        for ids in group:
            count = len(ids) // width
            rows.append(ids[: count * width].reshape(count, width))
        tail = np.concatenate([ids[(len(ids) // width) * width :] for ids in group])
        count = len(tail) // width
        rows.append(tail[: count * width].reshape(count, width))
    return np.concatenate(rows)


def _streams(tmp_path: Path, lengths: list[int], split: str) -> tuple[TokenFiles, list[np.ndarray]]:
    rng = np.random.default_rng(len(lengths) + sum(lengths))
    paths, arrays = [], []
    for i, n in enumerate(lengths):
        ids = rng.integers(0, 1000, n).astype(np.int32)
        path = tmp_path / f"{split}-{i}.npy"
        np.save(path, ids)
        paths.append(str(path))
        arrays.append(ids)
    return TokenFiles(tuple(paths), tuple(lengths), len(lengths)), arrays


def _packed(tmp_path: Path, lengths: dict[str, list[int]], sources: int = 1, num_proc: int = 1) -> tuple:
    cfg = LMConfig(block_size=WIDTH - 1)
    if sources > 1:
        cfg = LMConfig(block_size=WIDTH - 1, sources=[LMSource(f"s{i}", 1.0) for i in range(sources)])
    parts, arrays = {}, {}
    for split, counts in lengths.items():
        parts[split], arrays[split] = _streams(tmp_path, counts, split)
    extra = {"source_files": len(lengths["train"])} if sources > 1 else {}
    ctx = StepContext(cfg, inputs={"encode": "fp"}, work=tmp_path / "work", engine=LocalEngine(num_proc))
    result = pack(ctx, DataState(parts=parts, form="encoded", extra=extra))
    return result, arrays


@pytest.mark.parametrize(
    ("lengths", "sources"),
    [
        pytest.param({"train": [12, 3, 25, 0, 9], "val": [7, 6]}, 1, id="tails-carried"),
        pytest.param({"train": [10, 15, 5], "val": [20]}, 1, id="whole-blocks-only"),
        pytest.param({"train": [12, 3, 25, 4, 9, 11], "val": [7, 6, 4, 8, 3, 2]}, 2, id="mixture-per-source"),
    ],
)
def test_the_shards_joined_in_index_order_are_the_one_file_layout(tmp_path, lengths, sources):
    result, arrays = _packed(tmp_path, lengths, sources)
    for split, streams in arrays.items():
        blocks = result.state.parts[split]
        expected = _one_file_layout(streams, sources, WIDTH)
        assert isinstance(blocks, ShardedBlocks) and len(blocks) == len(expected)
        assert np.array_equal(np.asarray(blocks), expected)
        assert result.stats[f"{split}_blocks"] == len(expected)
        # read back from disk through the index alone (what a rank holds)
        reopened = ShardedBlocks.open(blocks.folder)
        assert np.array_equal(np.asarray(reopened), expected)
        assert sum(reopened.counts) == len(expected) and (blocks.folder / INDEX_NAME).is_file()


def test_each_task_writes_a_file_of_its_own_and_no_shared_block_file(tmp_path):
    result, _ = _packed(tmp_path, {"train": [12, 3, 25, 0, 9], "val": [7, 6]}, num_proc=2)
    folder = result.state.parts["train"].folder
    names = sorted(p.name for p in folder.iterdir())
    # files with no whole block write nothing; the joined tails are one more shard
    assert names == ["index.json", "part-00000.npy", "part-00002.npy", "part-00004.npy", "tail-000.npy"]
    assert not list(tmp_path.rglob("blocks.npy"))


def test_reading_a_batch_across_shards_keeps_the_asked_order(tmp_path):
    result, arrays = _packed(tmp_path, {"train": [12, 3, 25, 0, 9], "val": [7, 6]})
    blocks = result.state.parts["train"]
    whole = _one_file_layout(arrays["train"], 1, WIDTH)
    rows = np.array([len(whole) - 1, 0, 4, 2, 4, -1])
    assert np.array_equal(blocks[rows], whole[rows])
    assert np.array_equal(blocks[3], whole[3]) and np.array_equal(blocks[1:5], whole[1:5])
    with pytest.raises(IndexError):
        blocks[len(whole)]


def test_a_shard_that_is_not_what_the_index_says_is_a_data_error_naming_it(tmp_path):
    result, _ = _packed(tmp_path, {"train": [12, 3, 25, 0, 9], "val": [7, 6]})
    folder = result.state.parts["train"].folder
    np.save(folder / "part-00002.npy", np.zeros((2, WIDTH), dtype=np.int32))  # 5 blocks before
    with pytest.raises(DataError, match=r"part-00002\.npy.*delete the prepared folder"):
        np.asarray(ShardedBlocks.open(folder))
    (folder / INDEX_NAME).write_text("{}")
    with pytest.raises(DataError, match=r"index\.json"):
        ShardedBlocks.open(folder)


def test_the_index_takes_its_width_from_the_shards_and_refuses_shards_of_two_widths(tmp_path):
    """The block index's width is the shards' own (issue #44: the config's block_size never enters block_shards)."""
    write_shard(tmp_path / "a.npy", np.zeros((3, 9), np.int32))
    write_shard(tmp_path / "b.npy", np.zeros((2, 9), np.int32))
    write_index(tmp_path, [("a.npy", 3), ("b.npy", 2)])
    assert ShardedBlocks.open(tmp_path).shape == (5, 9)
    write_shard(tmp_path / "c.npy", np.zeros((2, 5), np.int32))
    with pytest.raises(DataError, match=r"not one n × width array .*widths \[5, 9\]"):
        write_index(tmp_path, [("a.npy", 3), ("c.npy", 2)])
    with pytest.raises(DataError, match=r"rows unlike the index: \['b.npy'\]"):
        write_index(tmp_path, [("a.npy", 3), ("b.npy", 4)])


@pytest.mark.parametrize("target", ["part-00000.npy", "index.json"])
def test_a_damaged_shard_or_index_in_the_cache_is_caught_and_prepared_anew(tmp_path, target):
    from lightning_order import CacheWarning, OrderedLMDataModule

    dm = OrderedLMDataModule(
        cache_dir=str(tmp_path), max_documents=200, vocab_size=300, block_size=16, num_proc=1
    )
    dm.setup("fit")
    intact = np.asarray(dm.blocks("val")).copy()
    path = dm.cache_path / "train" / "blocks" / target
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte, in place, the same size
    path.write_bytes(bytes(data))
    fresh = OrderedLMDataModule(
        cache_dir=str(tmp_path), max_documents=200, vocab_size=300, block_size=16, num_proc=1
    )
    with pytest.warns(CacheWarning, match=f"damaged.*{target}"):
        fresh.prepare_data()
    fresh.setup("fit")
    assert np.array_equal(np.asarray(fresh.blocks("val")), intact)


# -- issue #42, item 6: the joined tails keep the blocks' document semantics -------------------
EOS, BOS = 0, 1


def _documents_stream(rng: np.random.Generator, first: int, count: int, bos: bool) -> tuple[np.ndarray, int]:
    """``count`` documents numbered from ``first``: ``[BOS] d*100+10+offset ... EOS`` each."""
    ids: list[int] = []
    for doc in range(first, first + count):
        ids += [BOS] * bos + [doc * 100 + 10 + k for k in range(int(rng.integers(1, 12)))] + [EOS]
    return np.asarray(ids, dtype=np.int32), first + count


def _true_positions(row: np.ndarray, bos: bool) -> list[int]:
    """Each token's position in its own document, from its value: BOS 0, then its offset (+1 after a BOS)."""
    found: list[int] = []
    for token in row.tolist():
        if token == BOS:
            found.append(0)
        elif token == EOS:
            found.append(found[-1] + 1 if found else -1)
        else:
            found.append((token - 10) % 100 + bos)
    return found


@pytest.mark.parametrize("bos", [True, False], ids=["bos", "no-bos"])
def test_joined_tails_never_put_a_document_s_middle_after_an_end_of_text(tmp_path, bos):
    rng = np.random.default_rng(8)  # lengths whose tails, joined, splice documents (before #42)
    streams, first = [], 0
    for count in (5, 3, 6, 1, 4, 7):
        ids, first = _documents_stream(rng, first, count, bos)
        streams.append(ids)
    paths = []
    for i, ids in enumerate(streams):
        np.save(tmp_path / f"train-{i}.npy", ids)
        paths.append(str(tmp_path / f"train-{i}.npy"))
    tokenizer = Tokenizer(models.WordLevel({"<|endoftext|>": EOS, "<s>": BOS, "[UNK]": 2}, unk_token="[UNK]"))
    parts = {"train": TokenFiles(tuple(paths), tuple(len(s) for s in streams), first)}
    ctx = StepContext(LMConfig(block_size=WIDTH - 1), inputs={"encode": "fp"}, work=tmp_path / "work")
    result = pack(ctx, DataState(parts=parts, form="encoded", tokenizer=tokenizer))
    blocks = np.asarray(result.state.parts["train"])
    assert result.stats["train_blocks"] == len(blocks) > 0
    assert result.stats["train_dropped_tokens"] == sum(len(s) for s in streams) - blocks.size
    assert result.stats["train_eos_tokens"] == int((blocks == EOS).sum())
    starts = {BOS} if bos else {doc * 100 + 10 for doc in range(first)}
    after_eos = blocks[:, 1:][blocks[:, :-1] == EOS]
    assert set(after_eos.tolist()) <= starts  # a document start after every end-of-text
    # document_attention's positions: past a row's first end-of-text, each token's own position
    positions = document_positions(torch.from_numpy(blocks).long(), EOS).numpy()
    for row, found in zip(blocks, positions):
        ends = np.flatnonzero(row == EOS)
        if len(ends):
            assert found[ends[0] + 1 :].tolist() == _true_positions(row, bos)[ends[0] + 1 :], row


def test_tails_without_end_of_text_are_joined_whole(tmp_path):
    # eos=False (the pack-without-eos experiment): no document start is known, nothing is dropped
    tokenizer = Tokenizer(models.WordLevel({"<|endoftext|>": EOS, "[UNK]": 2}, unk_token="[UNK]"))
    parts, arrays = {}, {}
    parts["train"], arrays["train"] = _streams(tmp_path, [12, 3, 25, 0, 9], "train")
    for path, ids in zip(parts["train"].paths, arrays["train"]):
        ids[ids == EOS] = 1  # no end-of-text anywhere
        np.save(path, ids)
    ctx = StepContext(LMConfig(block_size=WIDTH - 1), inputs={"encode": "fp"}, work=tmp_path / "work")
    result = pack(ctx, DataState(parts=parts, form="encoded", tokenizer=tokenizer))
    assert np.array_equal(
        np.asarray(result.state.parts["train"]), _one_file_layout(arrays["train"], 1, WIDTH)
    )
    assert result.stats["train_fragment_tokens"] == 0
