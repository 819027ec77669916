"""The prepared tokenizer handed out as a ``transformers.PreTrainedTokenizerFast``, and saved beside checkpoints.

``dm.hf_tokenizer`` wraps a copy of the tokenizer the data was encoded with (``dm.tokenizer``,
read from the verified cache) with the special tokens ``build_vocab`` recorded (end-of-text,
BOS, pad, unknown) and ``add_bos_token`` as the blocks hold a document start, so
``hf_tokenizer(prompt).input_ids`` is what the model saw after a document boundary. A supplied
tokenizer's ``chat_template`` and ``model_max_length`` are kept (its settings, which do not shape
the data).

The trained model and its tokenizer travel together: each time Lightning saves a checkpoint,
``OrderedLMDataModule`` writes the tokenizer with ``save_pretrained`` into a ``tokenizer/``
folder beside the checkpoints (the checkpoint callback's ``dirpath``), on global rank zero, and
only when its content changed; ``AutoTokenizer.from_pretrained`` reads it back. The folder is
written beside, not inside, the checkpoint: a ``.ckpt`` is loaded with ``weights_only=True`` and
holds no objects.

``transformers`` is imported only here and only when asked for (it is an optional dependency);
without it ``hf_tokenizer`` raises :class:`ImportError` naming the install, and the folder
beside the checkpoints holds ``tokenizer.json`` alone.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

__all__ = [
    "TOKENIZER_FOLDER",
    "hf_tokenizer_of",
    "import_transformers",
    "save_beside_checkpoints",
    "save_tokenizer",
]

#: The folder, beside the checkpoints, that holds the tokenizer of the trained model.
TOKENIZER_FOLDER = "tokenizer"


def import_transformers() -> Any:
    """``transformers``, or an :class:`ImportError` that says how to install it."""
    try:
        import transformers
    except ImportError as err:
        raise ImportError(
            "dm.hf_tokenizer needs the optional dependency transformers (not installed): "
            "pip install transformers (or pip install 'lightning-order[dev]'); dm.tokenizer is the same "
            "tokenizer as a tokenizers.Tokenizer"
        ) from err
    return transformers


def hf_tokenizer_of(
    tokenizer: Tokenizer, special: Mapping[str, str], settings: Mapping[str, Any] | None = None
) -> Any:
    """A ``PreTrainedTokenizerFast`` over a copy of ``tokenizer`` with the ``special`` tokens set.

    Args:
        tokenizer: the prepared tokenizer (its post-processor adds the BOS, if any).
        special: ``eos_token``, and the ``bos_token``, ``pad_token``, ``unk_token`` it has.
        settings: the supplied tokenizer's ``chat_template`` and ``model_max_length``, those it has
            (:data:`~lightning_order.data.lm.tokenizer_source.HF_SETTINGS`).
    """
    transformers = import_transformers()
    backend = Tokenizer.from_str(tokenizer.to_str())  # a copy: changes to it never reach dm.tokenizer
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        **dict(settings or {}),
        **dict(special),
        # Stated, so transformers (which rebuilds the post-processor from these flags when they
        # are given) keeps exactly the document start of the blocks, here and after a reload.
        add_bos_token="bos_token" in special,
        add_eos_token=False,
    )


def _same_content(folder: Path, tokenizer: Tokenizer) -> bool:
    try:
        return (folder / "tokenizer.json").read_text(encoding="utf-8") == tokenizer.to_str()
    except (OSError, UnicodeDecodeError):
        return False


def save_tokenizer(
    folder: str | os.PathLike[str],
    tokenizer: Tokenizer,
    special: Mapping[str, str],
    settings: Mapping[str, Any] | None = None,
) -> Path:
    """Writes the tokenizer as a Hugging Face folder at ``folder`` (atomically: a sibling, then renamed).

    With ``transformers``: ``save_pretrained`` of :func:`hf_tokenizer_of` (``special`` and
    ``settings`` as there). Without it: ``tokenizer.json`` alone (a warning says so).

    Returns:
        The folder.
    """
    target = Path(folder)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        try:
            hf = hf_tokenizer_of(tokenizer, special, settings)
        except ImportError as err:
            warnings.warn(f"{err}; wrote tokenizer.json alone to {target}", stacklevel=2)
            tokenizer.save(str(temp / "tokenizer.json"))
        else:
            hf.save_pretrained(str(temp))
            # transformers writes its own serialisation: the one the blocks were encoded with wins.
            tokenizer.save(str(temp / "tokenizer.json"))
        old = target.with_name(f".{target.name}-old-{os.getpid()}")
        if target.exists():
            os.replace(target, old)
        os.replace(temp, target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return target


def save_beside_checkpoints(
    trainer: Any, tokenizer: Tokenizer, special: Mapping[str, str], settings: Mapping[str, Any] | None = None
) -> Path | None:
    """Writes ``<checkpoint dirpath>/tokenizer/`` on global rank zero when its content is not there yet.

    ``special`` and ``settings`` as in :func:`hf_tokenizer_of`.

    Returns:
        The folder, or ``None`` (no trainer, not rank zero, no checkpoint callback with a ``dirpath``).
    """
    callback = getattr(trainer, "checkpoint_callback", None)
    dirpath = getattr(callback, "dirpath", None)
    if trainer is None or not getattr(trainer, "is_global_zero", True) or not dirpath:
        return None
    folder = Path(dirpath) / TOKENIZER_FOLDER
    if _same_content(folder, tokenizer):
        return folder
    return save_tokenizer(folder, tokenizer, special, settings)
