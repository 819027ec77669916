"""``DataConfig``: the arguments of :class:`~lightning_order.OrderedDataModule`, typed, documented and checked.

A subclass of :class:`~lightning_order.data.engine.config.BaseDataConfig` (the fields every
pipeline shares) with the classification fields, each documented under its declaration. It
validates itself when built and produces the cache identity: the plain data whose fingerprint
names the cache folder. The step functions read their parameters from it, so a step is a
function of plain data and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal, get_args

from lightning_order.data.engine.arguments import after
from lightning_order.data.engine.config import (
    BaseDataConfig,
    check_bool,
    check_choice,
    check_int,
    check_optional_str,
    shapes,
)
from lightning_order.data.text.demo import DEMO_NUMERIC_COLUMNS
from lightning_order.data.text.vocab import check_vocab_size
from lightning_order.errors import DataError

__all__ = ["CODE_VERSION", "DataConfig", "TokenizerKind"]

#: Bump when a step's output changes for the same config, so old caches are not reused.
CODE_VERSION = "3"

#: The tokenizers ``build_vocab`` can train (``Literal``: LightningCLI's ``--help`` lists them).
TokenizerKind = Literal["wordpiece", "bpe"]


def _demo(config: DataConfig) -> bool:
    """The demo corpus's fields shape the data only when it is read (no ``dataset``)."""
    return config.dataset is None


@dataclass(frozen=True)
class DataConfig(BaseDataConfig):
    """The arguments of :class:`~lightning_order.OrderedDataModule` (each documented under its field).

    Raises:
        DataError: a value is out of range or of the wrong kind; the message names the argument,
            the expected value and the one given, and the step the argument belongs to.
    """

    label_column: str = field(default="label", metadata=after("text_column"))
    """the column holding the class label."""
    numeric_columns: Sequence[str] = ()
    """numeric columns to standardise and feed as features. Empty with the demo corpus means the demo's own numeric columns."""
    group_column: str | None = None
    """split by this column's value instead of the cleaned text (rows of a group stay together)."""
    _: KW_ONLY  # by keyword only; OrderedDataModule's positional order is read from the fields (after(...))
    tokenizer: TokenizerKind = field(default="wordpiece", metadata=after("vocab_size"))
    """the tokenizer to train: ``"wordpiece"`` or ``"bpe"``."""
    max_length: int = 128
    """token ids are padded/truncated to this length."""
    demo_size: int = field(default=20000, metadata=after("cache_dir", shapes(key="demo.size", when=_demo)))
    """rows of the demo corpus (about 190 bytes of text each)."""
    lowercase: bool = field(default=True, metadata=after("load_split"))
    """lower-case the text when cleaning."""
    demo_sources: int = field(default=1, metadata=shapes(key="demo.sources", when=_demo))
    """the demo corpus comes in this many contiguous blocks with different numeric scales."""
    demo_seed: int = field(default=0, metadata=shapes(key="demo.seed", when=_demo))
    """the demo corpus generator's seed (``seed`` only moves the split)."""
    engineered_features: tuple[str, ...] = field(default=(), metadata={"internal": True})
    """the columns ``engineer_features`` adds (set by the DataModule class, not by a config file)."""
    overrides: dict[str, str] = field(default_factory=dict, metadata={"internal": True})
    """A hash of each overridden row-wise step's source (set by the DataModule class)."""

    def validate(self) -> None:
        """The shared checks (:meth:`BaseDataConfig.validate`), then the classification fields."""
        super().validate()
        numeric = tuple(self.numeric_columns)
        if any(not isinstance(c, str) for c in numeric):
            raise DataError(
                f"numeric_columns must be column names, got {list(numeric)!r}", step="engineer_features"
            )
        if self.dataset is None and not numeric:
            numeric = DEMO_NUMERIC_COLUMNS  # the demo corpus brings its own numeric columns
        object.__setattr__(self, "numeric_columns", numeric)
        object.__setattr__(self, "engineered_features", tuple(self.engineered_features))
        check_optional_str("group_column", self.group_column, step="split")
        check_vocab_size(self.vocab_size)
        check_choice("tokenizer", self.tokenizer, get_args(TokenizerKind), step="build_vocab")
        check_int(
            "max_length", self.max_length, step="encode", least=1, most=1 << 20, fix="e.g. max_length=128"
        )
        least = 0 if self.dataset is not None else 1
        check_int(
            "demo_size",
            self.demo_size,
            step="load",
            least=least,
            fix="the demo corpus's rows, e.g. demo_size=2000 (or pass dataset=... for your own data)",
        )
        check_int("demo_sources", self.demo_sources, step="load", least=1, fix="e.g. demo_sources=1")
        check_int("demo_seed", self.demo_seed, step="load", fix="e.g. demo_seed=0")
        check_bool("lowercase", self.lowercase, step="clean")

    @property
    def key_column(self) -> str:
        """The column the split is keyed on: the group column, else the (cleaned) text."""
        return self.group_column or self.text_column

    def fixed_identity(self) -> dict[str, Any]:
        """The code version: bumped when a step's output changes for the same fields."""
        return {"code_version": CODE_VERSION}

    def load_identity(self) -> dict[str, Any]:
        """The part of the identity that decides which rows ``load`` reads."""
        ident = self.identity(())
        return {k: ident.get(k) for k in ("dataset_config", "load_split", "data_files", "demo")}
