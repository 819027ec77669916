"""``LMConfig``: the arguments of :class:`~lightning_order.data.lm.datamodule.OrderedLMDataModule`, checked.

One frozen dataclass holds everything that shapes the prepared language-modelling data. It
validates itself when built (a :class:`~lightning_order.errors.DataError` naming the step the
argument belongs to, what was expected, what was given) and produces the cache identity. The
shared fields (where the data comes from, how it is split and served) are
:class:`~lightning_order.data.engine.config.BaseDataConfig`'s.

The built-in corpus (``dataset=None``) is identified by the Python build and the source of the
corpus module rather than by its text, so a warm run never imports the hundred modules it reads;
the text's own fingerprint is recorded by ``load`` and travels with the data fingerprints.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import sys
from dataclasses import KW_ONLY, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, get_args

from lightning_order.data.engine.arguments import after
from lightning_order.data.engine.config import (
    SERVES,
    BaseDataConfig,
    check_bool,
    check_choice,
    check_fraction,
    check_int,
    check_optional_str,
    shapes,
)
from lightning_order.data.engine.ray_engine import check_ray_address
from lightning_order.data.engine.storage import file_digest
from lightning_order.data.lm.mixture import LMSource, normalise_sources, sources_identity
from lightning_order.data.lm.spec import NAME
from lightning_order.data.lm.tokenizer_source import TokenizerSource, read_source
from lightning_order.errors import DataError

__all__ = [
    "AUTO",
    "EOS_TOKEN",
    "LM_CODE_VERSION",
    "BatchFormat",
    "EngineName",
    "LMConfig",
    "LMSource",
    "SampleBy",
    "padded_size",
]

#: Bump when an LM step's output changes for the same config, so old caches are not reused.
LM_CODE_VERSION = "6"
#: ``bos_token``'s default: what a supplied tokenizer adds (none for a trained BPE; :mod:`.bos`).
AUTO = "auto"
#: The end-of-text token ``build_vocab`` declares and ``encode`` puts after every document.
EOS_TOKEN = "<|endoftext|>"
#: How ``dataset="text"`` files are cut into documents (``datasets``' text builder's ``sample_by``).
SampleBy = Literal["document", "paragraph", "line"]
#: The engines the per-partition work can run on.
EngineName = Literal["local", "ray"]
#: How a block becomes a batch: ``"shifted"`` labels (``OrderedCausalLM``), ``"hf"`` unshifted labels
#: and an attention mask (``transformers`` causal LMs shift them), ``"auto"`` from the model at setup.
BatchFormat = Literal["auto", "shifted", "hf"]
#: What an end-of-text token looks like: a control marker (``<...>`` or ``[...]``, no space inside),
#: never ordinary text, which cleaning would delete from every document.
_MARKER = re.compile(r"<[^<>\s]+>|\[[^\[\]\s]+\]")
#: The largest ``pad_vocab_multiple`` (a typo guard: a larger one would allocate absurd tables).
MAX_PAD_MULTIPLE = 1 << 16


def padded_size(vocab_size: int, multiple: int) -> int:
    """``vocab_size`` rounded up to a multiple of ``multiple`` (the embedding rows a model gets)."""
    return -(-int(vocab_size) // int(multiple)) * int(multiple)


@dataclass(frozen=True)
class LMConfig(BaseDataConfig):
    """The arguments of :class:`~lightning_order.OrderedLMDataModule` (each documented under its field).

    Raises:
        DataError: a value is out of range, of the wrong kind, or names a missing file.
    """

    _: KW_ONLY  # by keyword only; OrderedLMDataModule's positional order is read from the fields (after(...))
    num_proc: int | None = field(default=None, metadata=SERVES)
    """processes for the steps that run per partition of the corpus (cleaning, deduplication, the split, encoding, packing); ``None``: every available CPU. The prepared data does not depend on it."""
    block_size: int = field(default=128, metadata=after("enforce"))
    """tokens per training sequence; blocks of ``block_size + 1`` are stored (inputs and labels shifted by one)."""
    tokenizer_file: str | None = field(
        default=None, metadata=shapes(value=lambda config: config.tokenizer_digest)
    )
    """a local ``tokenizer.json`` to use instead of training one (recorded by content hash, as supplied); it must hold the end-of-text token (``eos_token``)."""
    pad_vocab_multiple: int = 64
    """``padded_vocab_size`` (the embedding rows a model gets) is the tokenizer size rounded up to this."""
    dedup_threshold: float = 0.8
    """word 5-gram Jaccard similarity from which two documents are near-duplicates (MinHash LSH), in (0, 1]."""
    max_documents: int | None = None
    """read at most this many documents (``None``: all)."""
    eos: bool = field(default=True, metadata=after("shuffle"))
    """end every document with the end-of-text token. ``False`` packs documents without boundaries (``pack-without-eos``: refused unless ``enforce=False``; for experiments)."""
    sample_by: SampleBy = field(
        default="document", metadata=shapes(when=lambda config: config.dataset == "text")
    )
    """with ``dataset="text"``: one document per file (``"document"``), per blank-line separated paragraph (``"paragraph"``) or per line (``"line"``); line breaks and indentation are kept."""
    eos_token: str = EOS_TOKEN
    """the end-of-text token, a control marker (``<...>`` or ``[...]``): declared by a trained tokenizer, required as a special token of a supplied one (e.g. ``"</s>"`` for a Llama-style ``tokenizer.json``), removed from the text by cleaning, put after every document by ``encode``."""
    num_partitions: int | None = None
    """the canonical partitions of the corpus (documents are assigned by a hash of their content); ``None``: from the corpus size, about 32 MB of text each (4 to 16 384, a power of two). Recorded in the ledger; a partition bounds the memory each process needs."""
    tokenizer_train_bytes: int = 128 << 20
    """the most bytes of text the tokenizer is trained on: a deterministic hash-sample of the train split (all of it when smaller). Recorded in the ``build_vocab`` record with the sample's size and fingerprint."""
    engine: EngineName = field(default="local", metadata=SERVES)
    """where the per-partition work runs: ``"local"`` (``num_proc`` processes on this machine) or ``"ray"`` (Ray tasks: a local Ray with ``num_proc`` CPUs, or the cluster at ``ray_address``; the ``ray`` extra). The prepared data is the same on either."""
    ray_address: str | None = field(default=None, metadata=SERVES)
    """with ``engine="ray"``: the address of a running Ray cluster (``"auto"``, ``"ray://head:10001"``); ``None`` starts a local Ray."""
    overrides: dict[str, str] = field(default_factory=dict, metadata={"internal": True})
    """a hash of each overridden step's source (``clean``; set by the DataModule class)."""
    batch_format: BatchFormat = field(default="auto", metadata=after("lock_timeout", SERVES))
    """the batches' form: ``"shifted"`` (``input_ids`` = block[:-1], ``labels`` = block[1:], for ``OrderedCausalLM``), ``"hf"`` (``input_ids`` = ``labels`` = block[:-1] and an all-ones ``attention_mask``: ``transformers`` causal LMs shift the labels themselves) or ``"auto"`` (``"hf"`` when the trainer's module is or wraps a ``transformers`` causal LM at ``setup``, else ``"shifted"``). The chosen one is recorded in the ledger's ``info["batch_format"]``; the prepared data does not depend on it."""
    document_attention: bool = field(default=False, metadata=SERVES)
    """keep packed documents apart: batches also hold ``position_ids`` that restart at 0 after each end-of-text id (a BOS there is position 0), which ``OrderedCausalLM`` turns into a block-diagonal causal mask and ``transformers`` models read as packed sequences (the ``"hf"`` form then has no ``attention_mask``; build the model with ``use_cache=False``). Recorded in the ledger's ``info["document_attention"]``; the prepared data does not depend on it."""
    tokenizer: str | Any | None = field(
        default=None, metadata=shapes(value=lambda config: config.tokenizer_source_digest)
    )
    """a tokenizer to use instead of training one: a local ``tokenizer.json``, a local Hugging Face tokenizer folder (``tokenizer.json`` with ``tokenizer_config.json`` / ``special_tokens_map.json``) or, from Python, a ``transformers.PreTrainedTokenizerFast``; read once when the DataModule is built and recorded by a hash of its content (never its path); a name that is not a local path is refused (no hub download). It must hold ``eos_token`` as a special token. Not with ``tokenizer_file``."""
    bos_token: str | None = "auto"
    """the token put at the start of every document in the blocks, and added by the tokenizer handed to users so a prompt encodes as a document starts: ``"auto"`` (what the supplied tokenizer adds: the special token its post-processor puts first, e.g. ``<s>``, as ``AutoTokenizer`` does; none for a trained BPE), ``None`` (no BOS), or a control marker (e.g. ``"<s>"``: declared by a trained BPE, a special token of a supplied one). Recorded by ``build_vocab`` and ``encode``."""
    sources: list[LMSource] | dict[str, float] | None = field(
        default=None,
        metadata=shapes(
            when=lambda config: config.sources is not None, value=lambda config: config.mixture_identity
        ),
    )
    """a weighted mixture instead of ``dataset``/``data_files``: a list of ``LMSource(path, weight, name=None, dataset="text", text_column=None)`` (YAML: a list of mappings with ``path`` and ``weight``) or a mapping path -> weight; the weights are held normalised (summing to 1: ``7, 3`` and ``0.7, 0.3`` are one mixture, one cache key). The sources are cleaned and deduplicated together, split by document, packed per source, and the train blocks drawn so each source's token share matches its weight (recorded in the ledger's ``pack`` record, ``mixture``); ``max_documents`` applies per source."""
    mixture_tolerance: float = field(default=0.01, metadata=SERVES)
    """with ``sources``: the most a source's realised share of the train tokens may stray from its weight (0.01: one percentage point) before the validator reports ``mixture-off-weight``."""
    shard_validation: bool = field(default=True, metadata=SERVES)
    """each data-parallel rank validates (and tests) on its own contiguous share of the validation blocks, none scored twice (a share one block shorter than the others ends with a padding block whose labels are all -100, so every rank runs as many steps); ``OrderedCausalLM`` reduces ``val_loss`` as a sum and a count, so it equals the 1-rank value. ``False``: every rank reads the whole split (for a model that logs a mean of rank means, see docs/lm.md). Recorded in the ledger's ``info["shard_validation"]``; the prepared data does not depend on it."""

    def validate(self) -> None:
        """The mixture's sources (before the shared checks: they replace ``dataset``), the shared checks (:meth:`BaseDataConfig.validate`), then the LM fields."""
        if self.sources is not None:
            self._validate_sources()
        super().validate()
        check_int(
            "vocab_size",
            self.vocab_size,
            step="build_vocab",
            least=257,
            most=1 << 24,
            fix="e.g. vocab_size=4096",
        )
        check_int(
            "block_size", self.block_size, step="pack", least=1, most=1 << 24, fix="e.g. block_size=128"
        )
        check_int(
            "pad_vocab_multiple",
            self.pad_vocab_multiple,
            step="build_vocab",
            least=1,
            most=MAX_PAD_MULTIPLE,
            fix="e.g. 64 (1: no padding)",
        )
        if self.max_documents is not None:
            check_int(
                "max_documents", self.max_documents, step="load", least=1, fix="or None for every document"
            )
        object.__setattr__(
            self,
            "dedup_threshold",
            check_fraction(
                "dedup_threshold",
                self.dedup_threshold,
                step="dedup",
                closed=True,
                fix="the word 5-gram Jaccard similarity from which two documents count as near-duplicates; "
                "e.g. dedup_threshold=0.8",
            ),
        )
        check_optional_str("tokenizer_file", self.tokenizer_file, step="build_vocab")
        if self.tokenizer_file is not None and not Path(self.tokenizer_file).expanduser().is_file():
            raise DataError(
                f"tokenizer_file {self.tokenizer_file!r} does not exist (or is not a file); pass the path of "
                "a local tokenizer.json, or tokenizer_file=None to train a byte-level BPE on the train split",
                step="build_vocab",
            )
        self._validate_tokenizer()
        check_bool("eos", self.eos, step="encode")
        check_choice("sample_by", self.sample_by, get_args(SampleBy), step="load")
        check_choice(
            "engine",
            self.engine,
            get_args(EngineName),
            step="load",
            fix="'local' or 'ray' (pip install 'lightning-order[ray]')",
        )
        check_ray_address(self.ray_address)
        check_bool("document_attention", self.document_attention, step="shard")
        check_bool("shard_validation", self.shard_validation, step="shard")
        check_choice(
            "batch_format",
            self.batch_format,
            get_args(BatchFormat),
            step="shard",
            fix="'hf' for transformers causal LMs (they shift labels themselves), 'shifted' for OrderedCausalLM",
        )
        if not isinstance(self.eos_token, str) or not self.eos_token.strip():
            raise DataError(
                f"eos_token must be a non-empty string, got {self.eos_token!r}; e.g. '</s>'",
                step="build_vocab",
            )
        if not _MARKER.fullmatch(self.eos_token):
            raise DataError(
                f"eos_token must be a control marker like '<|endoftext|>', '</s>' or '[SEP]', got "
                f"{self.eos_token!r}: cleaning removes it from every document and it is declared a special "
                "token, so an ordinary string would delete that text; pass the tokenizer's own end-of-text "
                "special token (e.g. eos_token='</s>')",
                step="build_vocab",
            )
        if self.num_partitions is not None:
            check_int(
                "num_partitions",
                self.num_partitions,
                step="clean",
                least=1,
                most=1 << 14,
                fix="e.g. 64, or null to choose from the corpus size",
            )
        check_int(
            "tokenizer_train_bytes",
            self.tokenizer_train_bytes,
            step="build_vocab",
            least=1 << 10,
            fix="e.g. 134217728 (128 MB)",
        )

    def _validate_tokenizer(self) -> None:
        """``tokenizer`` read now (a missing path is refused at construction), ``bos_token`` checked."""
        if self.tokenizer is not None and self.tokenizer_file is not None:
            raise DataError(
                "tokenizer and tokenizer_file were both given: pass one (tokenizer= takes a tokenizer.json, a "
                "local Hugging Face tokenizer folder or a PreTrainedTokenizerFast)",
                step="build_vocab",
            )
        _ = self.tokenizer_source
        bos = self.bos_token
        if bos is not None and bos != AUTO and not (isinstance(bos, str) and _MARKER.fullmatch(bos)):
            raise DataError(
                f"bos_token must be 'auto', None or a control marker like '<s>' or '<|begin_of_text|>', got {bos!r}",
                step="build_vocab",
            )
        if bos == self.eos_token:
            raise DataError(
                f"bos_token and eos_token are both {bos!r}: a document's start must differ from its end; "
                "pass bos_token=None for no BOS",
                step="build_vocab",
            )

    @cached_property
    def tokenizer_source(self) -> TokenizerSource | None:
        """``tokenizer`` read once (:func:`~.tokenizer_source.read_source`); ``None`` when not given."""
        return None if self.tokenizer is None else read_source(self.tokenizer)

    @property
    def tokenizer_source_digest(self) -> str | None:
        """The content hash of ``tokenizer`` (``None`` when not given): what enters the cache key."""
        source = self.tokenizer_source
        return None if source is None else source.digest

    @property
    def supplied_label(self) -> str | None:
        """How messages name a supplied tokenizer (``None``: the tokenizer is trained)."""
        if self.tokenizer_file is not None:
            return f"tokenizer_file {self.tokenizer_file!r}"
        source = self.tokenizer_source
        return None if source is None else source.label

    def _validate_sources(self) -> None:
        object.__setattr__(self, "sources", normalise_sources(self.sources))
        if self.dataset is not None or self.data_files is not None:
            raise DataError(
                f"sources replaces dataset and data_files (got dataset={self.dataset!r}, data_files="
                f"{self.data_files!r}); leave them out and give each source its files (and builder: "
                "LMSource(path=..., weight=..., dataset='json'))",
                step="load",
            )
        tolerance = self.mixture_tolerance
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
            raise DataError(
                f"mixture_tolerance must be a fraction in [0, 1), got {tolerance!r}; e.g. 0.01 (one point)",
                step="shard",
            )
        _ = self.mixture_identity  # each source's files, read (and checked) now

    @property
    def source_list(self) -> tuple[LMSource, ...]:
        """The mixture's sources, checked and named (empty without ``sources``)."""
        return normalise_sources(self.sources) or ()

    @cached_property
    def mixture_identity(self) -> list[dict[str, Any]] | None:
        """Each source's name, builder, weight and files' identity (``None`` without ``sources``)."""
        return None if self.sources is None else sources_identity(self)

    @cached_property
    def tokenizer_digest(self) -> str | None:
        """The xxh3 hash of ``tokenizer_file``'s bytes (``None`` when the tokenizer is trained)."""
        return None if self.tokenizer_file is None else file_digest(Path(self.tokenizer_file).expanduser())

    def load_identity(self) -> dict[str, Any]:
        """What decides which documents ``load`` reads."""
        ident: dict[str, Any] = {**self.source_identity(), "max_documents": self.max_documents}
        if self.dataset == "text":
            ident["sample_by"] = self.sample_by
        if self.sources is not None:
            ident["sources"] = self.mixture_identity
        elif self.dataset is None:
            ident["stdlib_corpus"] = _stdlib_corpus_identity()
        return ident

    def fixed_identity(self) -> dict[str, Any]:
        """The pipeline, its code version and, for the built-in corpus, what its text is made of."""
        fixed: dict[str, Any] = {"pipeline": NAME, "code_version": LM_CODE_VERSION}
        if self.dataset is None and self.sources is None:
            fixed["stdlib_corpus"] = _stdlib_corpus_identity()
        return fixed


def _stdlib_corpus_identity() -> dict[str, str]:
    """The built-in corpus by the Python build and its module's source, never its text (not read)."""
    from lightning_order.data.lm import corpus as lm_corpus

    source = inspect.getsource(lm_corpus)
    return {"python": sys.version, "module": hashlib.sha256(source.encode()).hexdigest()[:16]}
