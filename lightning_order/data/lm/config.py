"""``LMConfig``: the arguments of :class:`~lightning_order.data.lm.datamodule.OrderedLMDataModule`, checked.

One frozen dataclass holds everything that shapes the prepared language-modelling data. It
validates itself when built (a :class:`~lightning_order.errors.DataError` naming the step the
argument belongs to, what was expected, what was given) and produces the cache identity. The
loading fields have the names and meanings of :class:`~lightning_order.data.text.config.DataConfig`,
so the classification pipeline's file loading (``data/load.py``) serves both.

The built-in corpus (``dataset=None``) is identified by the Python build and the source of the
corpus module rather than by its text, so a warm run never imports the hundred modules it reads;
the text's own fingerprint is recorded by ``load`` and travels with the data fingerprints.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any, get_args

from lightning_order.data.engine import inputs as _inputs
from lightning_order.data.engine.inputs import InputHash
from lightning_order.data.engine.storage import file_digest
from lightning_order.errors import DataError

__all__ = ["EOS_TOKEN", "LM_CODE_VERSION", "LMConfig", "padded_size"]

#: Bump when an LM step's output changes for the same config, so old caches are not reused.
LM_CODE_VERSION = "1"
#: The end-of-text token ``build_vocab`` declares and ``encode`` puts after every document.
EOS_TOKEN = "<|endoftext|>"


def padded_size(vocab_size: int, multiple: int) -> int:
    """``vocab_size`` rounded up to a multiple of ``multiple`` (the embedding rows a model gets)."""
    return -(-int(vocab_size) // int(multiple)) * int(multiple)


def _positive_int(name: str, value: Any, step: str, fix: str, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        kind = " (a bool is not an int)" if isinstance(value, bool) else ""
        raise DataError(f"{name} must be an int >= {least}, got {value!r}{kind}; {fix}", step=step)
    return int(value)


@dataclass(frozen=True)
class LMConfig(_inputs.InputFiles):
    """What shapes the prepared LM data (see :class:`~lightning_order.OrderedLMDataModule` for each field).

    Raises:
        DataError: a value is out of range, of the wrong kind, or names a missing file.
    """

    dataset: str | None = None
    data_files: Any = None
    text_column: str = "text"
    val_fraction: float = 0.1
    seed: int = 0
    vocab_size: int = 8000
    num_proc: int = 1
    block_size: int = 128
    tokenizer_file: str | None = None
    pad_vocab_multiple: int = 64
    dedup_threshold: float = 0.8
    max_documents: int | None = None
    dataset_config: str | None = None
    load_split: str = "train"
    input_hash: InputHash = "content"
    eos: bool = True

    def __post_init__(self) -> None:
        val = self.val_fraction
        if isinstance(val, bool) or not isinstance(val, (int, float)) or not 0.0 < float(val) < 1.0:
            raise DataError(
                f"val_fraction must be in (0, 1), got {val!r}; e.g. val_fraction=0.1", step="split"
            )
        object.__setattr__(self, "val_fraction", float(val))
        _positive_int("vocab_size", self.vocab_size, "build_vocab", "e.g. vocab_size=4096", least=257)
        _positive_int("block_size", self.block_size, "pack", "e.g. block_size=128")
        _positive_int("pad_vocab_multiple", self.pad_vocab_multiple, "build_vocab", "e.g. 64 (1: no padding)")
        _positive_int("num_proc", self.num_proc, "encode", "e.g. num_proc=1")
        if self.max_documents is not None:
            _positive_int("max_documents", self.max_documents, "load", "or None for every document")
        thr = self.dedup_threshold
        if isinstance(thr, bool) or not isinstance(thr, (int, float)) or not 0.0 < float(thr) <= 1.0:
            raise DataError(
                f"dedup_threshold must be in (0, 1], got {thr!r}: the word 5-gram Jaccard similarity from "
                "which two documents count as near-duplicates; e.g. dedup_threshold=0.8",
                step="dedup",
            )
        object.__setattr__(self, "dedup_threshold", float(thr))
        if self.input_hash not in get_args(InputHash):
            raise DataError(
                f"input_hash must be one of {', '.join(get_args(InputHash))}, got {self.input_hash!r}",
                step="load",
            )
        if self.tokenizer_file is not None and not Path(self.tokenizer_file).expanduser().is_file():
            raise DataError(
                f"tokenizer_file {self.tokenizer_file!r} does not exist (or is not a file); pass the path of "
                "a local tokenizer.json, or tokenizer_file=None to train a byte-level BPE on the train split",
                step="build_vocab",
            )
        _ = self.input_identity  # the input files as they are when the config is built
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "eos", bool(self.eos))

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> LMConfig:
        """The config of the fields found in ``arguments`` (e.g. a DataModule's ``locals()``)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in arguments.items() if k in names})

    @cached_property
    def tokenizer_digest(self) -> str | None:
        """The xxh3 hash of ``tokenizer_file``'s bytes (``None`` when the tokenizer is trained)."""
        return None if self.tokenizer_file is None else file_digest(Path(self.tokenizer_file).expanduser())

    def load_identity(self) -> dict[str, Any]:
        """What decides which documents ``load`` reads."""
        ident: dict[str, Any] = {
            "dataset": self.dataset,
            "dataset_config": self.dataset_config,
            "load_split": self.load_split,
            "data_files": self.input_identity,
            "text_column": self.text_column,
            "max_documents": self.max_documents,
        }
        if self.dataset is None:
            from lightning_order.data.lm import corpus as lm_corpus

            source = inspect.getsource(lm_corpus)
            ident["stdlib_corpus"] = {
                "python": sys.version,
                "module": hashlib.sha256(source.encode()).hexdigest()[:16],
            }
        return ident

    def identity(self, order: Sequence[str]) -> dict[str, Any]:
        """Everything that shapes the prepared data, as plain data (its fingerprint is the cache key)."""
        return {
            "pipeline": "lm",
            "code_version": LM_CODE_VERSION,
            **self.load_identity(),
            "val_fraction": self.val_fraction,
            "seed": self.seed,
            "vocab_size": self.vocab_size,
            "block_size": self.block_size,
            "tokenizer_file": self.tokenizer_digest,
            "pad_vocab_multiple": self.pad_vocab_multiple,
            "dedup_threshold": self.dedup_threshold,
            "eos": self.eos,
            "order": list(order),
        }
