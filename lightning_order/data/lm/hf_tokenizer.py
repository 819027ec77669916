"""The prepared tokenizer handed out as a ``transformers.PreTrainedTokenizerFast``, and saved beside checkpoints.

``dm.hf_tokenizer`` wraps a copy of the tokenizer the data was encoded with (``dm.tokenizer``,
read from the verified cache) with the special tokens ``build_vocab`` recorded (end-of-text,
BOS, pad, unknown) and ``add_bos_token`` as the blocks hold a document start, so
``hf_tokenizer(prompt).input_ids`` is what the model saw after a document boundary. A supplied
tokenizer's ``chat_template`` and ``model_max_length`` are kept (its settings, which do not shape
the data).

The trained model and its tokenizer travel together: each time Lightning saves a checkpoint,
``OrderedLMDataModule`` writes the tokenizer with ``save_pretrained`` into a ``tokenizer/``
folder beside the checkpoints (the checkpoint callback's ``dirpath``, local or an fsspec URL as
Lightning's), on global rank zero, and only when its content changed; ``AutoTokenizer.from_pretrained``
reads it back. The folder is written beside, not inside, the checkpoint: a ``.ckpt`` is loaded
with ``weights_only=True`` and holds no objects. It is ours (:func:`~lightning_order.outputs.write_owned_folder`):
a user's folder, a file or a symlink at that path is never replaced, and neither it nor a folder
that cannot be written stops the run (an ``OutputWarning`` names the path and the fix).

``transformers`` is imported only here and only when asked for (it is an optional dependency);
without it ``hf_tokenizer`` raises :class:`ImportError` naming the install, and the folder
beside the checkpoints holds ``tokenizer.json`` alone (and our record of the files).
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from lightning_order.errors import OutputError, OutputWarning
from lightning_order.outputs import describe_os_error, join, write_owned_folder

__all__ = [
    "TOKENIZER_FOLDER",
    "hf_tokenizer_of",
    "import_transformers",
    "save_beside_checkpoints",
    "save_tokenizer",
    "tokenizer_files",
]

#: The folder, beside the checkpoints, that holds the tokenizer of the trained model.
TOKENIZER_FOLDER = "tokenizer"

#: What a user does when the path beside the checkpoints is not ours.
_FIX = (
    "remove it or give ModelCheckpoint another dirpath (dm.hf_tokenizer.save_pretrained(path) saves "
    "the tokenizer anywhere)"
)


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
        **dict(special),
        **dict(settings or {}),
        # Stated, so transformers (which rebuilds the post-processor from these flags when they
        # are given) keeps exactly the document start of the blocks, here and after a reload.
        add_bos_token="bos_token" in special,
        add_eos_token=False,
    )


def tokenizer_files(
    tokenizer: Tokenizer, special: Mapping[str, str], settings: Mapping[str, Any] | None = None
) -> dict[str, bytes]:
    """The files of the tokenizer's Hugging Face folder (name -> content), rendered in a temporary folder.

    With ``transformers``: what ``save_pretrained`` of :func:`hf_tokenizer_of` writes, its
    ``tokenizer.json`` replaced by the tokenizer the blocks were encoded with. Without it:
    ``tokenizer.json`` alone (a warning says so). The same tokenizer gives the same bytes, so a
    folder holding them is not written again. ``special`` and ``settings`` as in
    :func:`hf_tokenizer_of`.
    """
    files: dict[str, bytes] = {}
    try:
        hf = hf_tokenizer_of(tokenizer, special, settings)
    except ImportError as err:
        warnings.warn(f"{err}; wrote tokenizer.json alone (and our record of the files)", stacklevel=3)
    else:
        with tempfile.TemporaryDirectory(prefix="lightning-order-tokenizer-") as temp:
            hf.save_pretrained(temp)
            files = {p.name: p.read_bytes() for p in sorted(Path(temp).iterdir()) if p.is_file()}
    # transformers writes its own serialisation: the one the blocks were encoded with wins.
    files["tokenizer.json"] = tokenizer.to_str(pretty=True).encode("utf-8")
    return files


def save_tokenizer(
    folder: str | os.PathLike[str],
    tokenizer: Tokenizer,
    special: Mapping[str, str],
    settings: Mapping[str, Any] | None = None,
    *,
    fix: str = "remove it, or save elsewhere",
) -> Path | str:
    """Writes the tokenizer as a Hugging Face folder at ``folder`` (local or an fsspec URL), as ours.

    The folder is written beside and moved into place, with a record of the files written
    (:func:`~lightning_order.outputs.write_owned_folder`): it replaces only a folder written so,
    and is not rewritten when it already holds this content.

    Args:
        folder: where to write.
        tokenizer: the prepared tokenizer.
        special: its special tokens (see :func:`hf_tokenizer_of`).
        settings: its ``chat_template`` and ``model_max_length`` (see :func:`hf_tokenizer_of`).
        fix: what the user can do when something not ours is at ``folder``, for the message.

    Returns:
        The folder (a ``Path`` when local).

    Raises:
        OutputError: something not written by lightning_order is at ``folder`` (left as it is).
        OSError: the storage refused the write.
    """
    return write_owned_folder(os.fspath(folder), tokenizer_files(tokenizer, special, settings), fix=fix)


def save_beside_checkpoints(
    trainer: Any, tokenizer: Tokenizer, special: Mapping[str, str], settings: Mapping[str, Any] | None = None
) -> Path | str | None:
    """Writes ``<checkpoint dirpath>/tokenizer/`` on global rank zero when its content is not there yet.

    The ``dirpath`` may be an fsspec URL (``s3://...``), as Lightning's checkpoints. What is not
    ours at that path (a user's folder, a file, a symlink) is left as it is, and a folder that
    cannot be written is not either: each is an :class:`~lightning_order.errors.OutputWarning`
    naming the path and the fix, and training goes on (a run is worth more than this folder).
    ``special`` and ``settings`` as in :func:`hf_tokenizer_of`.

    Returns:
        The folder (a ``Path`` when local), or ``None`` (no trainer, not rank zero, no checkpoint
        callback with a ``dirpath``, or the folder was not written).
    """
    callback = getattr(trainer, "checkpoint_callback", None)
    dirpath = getattr(callback, "dirpath", None)
    if trainer is None or not getattr(trainer, "is_global_zero", True) or not dirpath:
        return None
    folder = join(dirpath, TOKENIZER_FOLDER)
    try:
        return save_tokenizer(folder, tokenizer, special, settings, fix=_FIX)
    except OutputError as err:
        warnings.warn(f"{err}; training goes on", OutputWarning, stacklevel=2)
    except OSError as err:
        warnings.warn(
            f"{folder}: not written ({describe_os_error(err)}); make {dirpath} writable or give "
            "ModelCheckpoint another dirpath (dm.hf_tokenizer.save_pretrained(path) saves it anywhere); "
            "training goes on",
            OutputWarning,
            stacklevel=2,
        )
    return None
