"""What every ordered DataModule shares: the cache folder, preparing it once, the manifest and dims.

:class:`PreparedCache` is a mixin for the thin DataModule shells (``OrderedDataModule``,
``OrderedLMDataModule``). A shell sets ``cache_dir``, ``cache_key`` and, to ``None``,
``_ledger``, ``_tokenizer`` and ``_verified`` in its constructor, and implements
``_prepare_into(folder)``, which writes a prepared folder; everything below follows from those.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from lightning_order.data.engine import cache as _cache
from lightning_order.ledger import StepLedger


class PreparedCache:
    """The cache side of a DataModule shell: where its data lives and how it is prepared once."""

    cache_dir: str | None
    cache_key: str
    _ledger: StepLedger | None
    _tokenizer: Tokenizer | None
    _verified: str | None

    def _prepare_into(self, folder: Path) -> None:  # pragma: no cover - every shell implements it
        raise NotImplementedError

    @property
    def cache_root(self) -> Path:
        """The cache root folder (``cache_dir`` or the default)."""
        return Path(self.cache_dir).expanduser() if self.cache_dir else _cache.default_cache_dir()

    @property
    def cache_path(self) -> Path:
        """The cache folder of this configuration (``<cache_root>/<cache_key>``)."""
        return self.cache_root / self.cache_key

    def prepare_data(self) -> None:
        """Runs the steps before ``shard`` once and publishes the cache folder (no state is assigned).

        Under a file lock: the first process prepares, the others wait and then find the
        finished cache. A complete cache of the same configuration is reused at once.
        """
        _cache.prepare_once(self.cache_root, self.cache_key, self._prepare_into)

    def _ensure_prepared(self) -> Path:
        # Every file of the cache is verified against the manifest's hashes once per instance.
        if self._verified != self.cache_key:
            if not _cache.is_complete(self.cache_path, self.cache_key):
                self.prepare_data()
            self._verified = self.cache_key
        return self.cache_path

    def _manifest(self) -> StepLedger:
        if self._ledger is None:
            self._ledger = StepLedger.load(self._ensure_prepared())
        return self._ledger

    @property
    def ledger(self) -> StepLedger:
        """The ledger: the prepared manifest, plus this rank's ``shard`` record after ``setup``."""
        return self._manifest()

    @property
    def dims(self) -> dict[str, Any]:
        """The data's dims, which the model is built from (prepares the data if needed)."""
        return dict(self._manifest().info["dims"])

    @property
    def vocab_size(self) -> int:
        """The tokenizer's size (may be below the requested ``vocab_size``)."""
        return self.dims["vocab_size"]

    @property
    def tokenizer(self) -> Tokenizer:
        """The :class:`tokenizers.Tokenizer` in use (read from the cache once; the same object after)."""
        if self._tokenizer is None:
            self._tokenizer = Tokenizer.from_file(str(self._ensure_prepared() / "tokenizer.json"))
        return self._tokenizer
