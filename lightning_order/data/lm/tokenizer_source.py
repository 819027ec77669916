"""The ``tokenizer=`` argument read once: a ``tokenizer.json``, a local Hugging Face folder, or an object.

Whatever form a supplied tokenizer takes, it is reduced here to the same plain snapshot
(:class:`TokenizerSource`): the ``tokenizer.json`` text, the special tokens its Hugging Face
config declares (``bos_token``, ``eos_token``, ``pad_token``, ``unk_token``) and whether that
config says to add a BOS, hashed together. The hash is of the content, never the path: a folder
moved elsewhere keeps its cache, a file edited in place gets a new one. Its ``chat_template`` and
``model_max_length`` are read too and handed on to the tokenizer users get, but not hashed: they
do not shape the data. The snapshot is taken
when the DataModule is built and ``build_vocab`` reads the snapshot, so the data always matches
the key, even if the object is changed afterwards.

No hub access: a string that is not a local file or folder is refused (``datasets``' or
``transformers``' caches are never consulted), and ``transformers`` is never imported here (an
object is read through its ``backend_tokenizer``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash

from lightning_order.errors import DataError

__all__ = ["HF_CONFIG_FILES", "HF_SETTINGS", "SPECIAL_NAMES", "TokenizerSource", "read_source"]

#: The Hugging Face config files of a tokenizer folder read for its special tokens (when present).
HF_CONFIG_FILES: tuple[str, ...] = ("tokenizer_config.json", "special_tokens_map.json")
#: The special tokens a Hugging Face tokenizer declares that the pipeline reads.
SPECIAL_NAMES: tuple[str, ...] = ("bos_token", "eos_token", "pad_token", "unk_token")
#: The settings of a Hugging Face tokenizer kept for the tokenizer users get (not the data's: not hashed).
HF_SETTINGS: tuple[str, ...] = ("chat_template", "model_max_length")
#: The file ``save_pretrained`` writes a chat template to (it wins over ``tokenizer_config.json``'s).
_CHAT_TEMPLATE_FILE = "chat_template.jinja"


@dataclass(frozen=True)
class TokenizerSource:
    """A supplied tokenizer as plain data (see the module docstring).

    Attributes:
        kind: ``"file"`` (a ``tokenizer.json``), ``"folder"`` (a local Hugging Face tokenizer folder)
            or ``"object"`` (a ``PreTrainedTokenizerFast`` or ``tokenizers.Tokenizer``).
        name: the path, or the object's class name (for messages and the ledger).
        text: the ``tokenizer.json`` content.
        special: the special tokens its Hugging Face config declares (:data:`SPECIAL_NAMES`).
        add_bos: the config's ``add_bos_token`` when it states one, else ``None``: hashed and
            recorded, never deciding the BOS (``transformers`` ignores it when a ``tokenizer.json``
            is there, so the post-processor decides; :mod:`~lightning_order.data.lm.bos`).
        digest: the xxh3-128 of all of it but ``settings``.
        settings: its :data:`HF_SETTINGS` (those it has): handed to ``dm.hf_tokenizer`` and the
            folder saved beside checkpoints; not hashed, as they do not shape the data.
    """

    kind: str
    name: str
    text: str = field(repr=False)
    special: dict[str, str]
    add_bos: bool | None
    digest: str
    settings: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def label(self) -> str:
        """How messages name it: ``tokenizer '<path>'``."""
        return f"tokenizer {self.name!r}"


def _digest(text: str, special: dict[str, str], add_bos: bool | None) -> str:
    digest = xxhash.xxh3_128(text.encode("utf-8"))
    digest.update(json.dumps({"special": special, "add_bos": add_bos}, sort_keys=True).encode())
    return digest.hexdigest()


def _token_text(value: Any) -> str | None:
    """A special token as the config writes it: a string, or an ``AddedToken`` dict with ``content``."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str) and value["content"]:
        return str(value["content"])
    return None


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise DataError(
            f"{what} {str(path)!r} is not readable JSON ({type(err).__name__}: {str(err)[:120]}); "
            "save the tokenizer again with save_pretrained()",
            step="build_vocab",
        ) from err
    if not isinstance(data, dict):
        raise DataError(
            f"{what} {str(path)!r} must hold a JSON object, got {type(data).__name__}", step="build_vocab"
        )
    return data


def _read_text(path: Path, label: str) -> str:
    """``path``'s text (UTF-8), or one ``DataError`` starting with ``label``."""
    try:
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"{label} cannot be read ({err})", step="build_vocab") from err


def _refuse_dangling(path: Path, name: str) -> None:
    """One ``DataError`` for a link whose target is gone (it would read as "not there", or a hub name)."""
    if path.is_symlink() and not path.exists():
        raise DataError(
            f"tokenizer {name!r} does not exist (a dangling link to {os.readlink(path)!r}); point the link "
            "at a tokenizer.json or a folder saved with save_pretrained(), or pass tokenizer=None to train a "
            "byte-level BPE",
            step="build_vocab",
        )


def _from_folder(folder: Path, name: str) -> TokenizerSource:
    main = folder / "tokenizer.json"
    _refuse_dangling(main, str(main))
    if not main.is_file():
        raise DataError(
            f"tokenizer {name!r} is a folder without a tokenizer.json (a slow, sentencepiece-only tokenizer?): "
            "save its fast form there with AutoTokenizer.from_pretrained(folder).save_pretrained(folder), "
            "or pass the path of a tokenizer.json",
            step="build_vocab",
        )
    text = _read_text(main, f"tokenizer {name!r}: {main}")
    special: dict[str, str] = {}
    add_bos: bool | None = None
    settings: dict[str, Any] = {}
    for config_name in reversed(HF_CONFIG_FILES):  # tokenizer_config.json read last: it wins
        path = folder / config_name
        if not path.is_file():
            continue
        data = _read_json(path, config_name)
        special.update({k: t for k in SPECIAL_NAMES if (t := _token_text(data.get(k))) is not None})
        if isinstance(data.get("add_bos_token"), bool):
            add_bos = bool(data["add_bos_token"])
        settings.update(_settings(data))
    template = folder / _CHAT_TEMPLATE_FILE
    if template.is_file():
        settings["chat_template"] = _read_text(template, f"tokenizer {name!r}: {template}")
    return TokenizerSource("folder", name, text, special, add_bos, _digest(text, special, add_bos), settings)


def _settings(found: Any) -> dict[str, Any]:
    """The :data:`HF_SETTINGS` of a config dict (or a tokenizer object's attributes) that are set."""
    given: dict[str, Any] = (
        found if isinstance(found, dict) else {key: getattr(found, key, None) for key in HF_SETTINGS}
    )
    settings: dict[str, Any] = {}
    template = given.get("chat_template")
    if isinstance(template, (str, list, dict)) and template:
        settings["chat_template"] = template
    length = given.get("model_max_length")
    if isinstance(length, int) and not isinstance(length, bool) and length > 0:
        settings["model_max_length"] = length
    return settings


def _from_object(value: Any) -> TokenizerSource:
    backend = getattr(value, "backend_tokenizer", value)
    to_str = getattr(backend, "to_str", None)
    if not callable(to_str):
        raise DataError(
            f"tokenizer must be a path (a tokenizer.json or a local Hugging Face tokenizer folder), a "
            f"transformers.PreTrainedTokenizerFast or a tokenizers.Tokenizer, got {type(value).__name__}; "
            "a slow tokenizer has no tokenizer.json: use its fast form (use_fast=True)",
            step="build_vocab",
        )
    text = str(to_str())
    special = {
        k: t for k in SPECIAL_NAMES if (t := _token_text(str(getattr(value, k, "") or ""))) is not None
    }
    name = type(value).__name__
    return TokenizerSource(
        "object", name, text, special, None, _digest(text, special, None), _settings(value)
    )


def read_source(value: Any) -> TokenizerSource:
    """Reads ``value`` (a path or an object, see the module docstring) once into a :class:`TokenizerSource`.

    Raises:
        DataError: an empty path, a dangling link, a path that is not a local file or folder (no
            hub download), a folder without
            ``tokenizer.json``, unreadable files, or an object with no ``tokenizer.json`` form.
    """
    if not isinstance(value, (str, os.PathLike)):
        return _from_object(value)
    name = os.fspath(value)
    if not name.strip():  # Path("") is ".": the working folder would be read
        raise DataError(
            f"tokenizer {name!r} is an empty path; pass the path of a tokenizer.json or of a folder saved "
            "with save_pretrained(), or tokenizer=None to train a byte-level BPE",
            step="build_vocab",
        )
    path = Path(name).expanduser()
    if path.is_dir():
        return _from_folder(path, name)
    _refuse_dangling(path, name)
    if not path.is_file():
        raise DataError(
            f"tokenizer {name!r} is not a local file or folder (names on the Hugging Face hub are not "
            "downloaded): pass the path of a tokenizer.json or of a folder saved with save_pretrained(), "
            "a PreTrainedTokenizerFast object, or tokenizer=None to train a byte-level BPE",
            step="build_vocab",
        )
    text = _read_text(path, f"tokenizer {name!r}")
    return TokenizerSource("file", name, text, {}, None, _digest(text, {}, None))
