"""BOS, decided once: which token (if any) starts every document, in the blocks and in the tokenizer users get.

What a document looks like to the model is one decision, recorded by ``build_vocab``: its start
(a BOS token or nothing) and its end (the end-of-text token). ``encode`` puts the BOS before
every document, and the tokenizer handed to users (``dm.tokenizer``, ``dm.hf_tokenizer``, the
folder saved beside checkpoints) gets a post-processor that adds exactly that BOS and no
end-of-text, so a prompt encodes as the blocks hold a document start.

``bos_token="auto"`` (the default) takes what the supplied tokenizer already does: its Hugging
Face config's ``add_bos_token`` when it states one (``transformers`` rebuilds the post-processor
from it), else the single special token its post-processor puts before a text (``<s> $A </s>``
gives ``<s>``); a trained byte-level BPE has none. ``None`` is no BOS; a token string is that
token (declared by a trained BPE, required as a special token of a supplied one).
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Tokenizer, processors

from lightning_order.data.lm.config import AUTO
from lightning_order.data.lm.tokenizer_source import TokenizerSource
from lightning_order.errors import DataError

__all__ = ["AUTO", "BosChoice", "added_by_post_processor", "choose_bos", "set_prompt_processor"]

#: A text every tokenizer encodes to at least one ordinary token.
_PROBE = "a"


@dataclass(frozen=True)
class BosChoice:
    """The BOS decided for the data: ``token`` (``None``: none), its ``id`` and where it came from (``origin``).

    ``origin`` is ``"config"`` (``bos_token`` named it), ``"tokenizer_config"`` (the supplied
    folder's ``add_bos_token``), ``"post_processor"`` (what the supplied post-processor adds) or
    ``"none"``.
    """

    token: str | None
    id: int | None
    origin: str


def added_by_post_processor(tokenizer: Tokenizer) -> tuple[list[int], list[int]]:
    """The ids ``tokenizer``'s post-processor puts before and after a single text (``[], []``: none)."""
    plain = tokenizer.encode(_PROBE, add_special_tokens=False).ids
    full = tokenizer.encode(_PROBE, add_special_tokens=True).ids
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return list(full[:start]), list(full[start + len(plain) :])
    return [], []


def _special_id(tokenizer: Tokenizer, token: str, label: str) -> int:
    """The id of ``token``, which must be a special token of ``tokenizer``."""
    special = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
    token_id = tokenizer.token_to_id(token)
    if token_id is None or token not in special:
        raise DataError(
            f"bos_token {token!r} is not a special token of {label} (its special tokens: {sorted(special)[:8]}): "
            "text could encode to it; pass one of them as bos_token=, bos_token=None for no BOS, or "
            f"declare it with tokenizer.add_special_tokens([{token!r}]) before saving",
            step="build_vocab",
        )
    return int(token_id)


def choose_bos(
    requested: str | None, tokenizer: Tokenizer, source: TokenizerSource | None, label: str
) -> BosChoice:
    """The BOS for ``requested`` (``"auto"``, ``None`` or a token; see the module docstring).

    Args:
        requested: the config's ``bos_token``.
        tokenizer: the tokenizer (supplied, or trained with the token declared).
        source: the supplied tokenizer's snapshot (its Hugging Face config), or ``None``.
        label: how messages name the tokenizer.

    Raises:
        DataError: the token is not a special token of the tokenizer, or the post-processor puts
            several tokens before a text (no single BOS to take: name one with ``bos_token=``).
    """
    if requested is None:
        return BosChoice(None, None, "none")
    if requested != AUTO:
        return BosChoice(requested, _special_id(tokenizer, requested, label), "config")
    if source is not None and source.add_bos is not None:
        token = source.special.get("bos_token") if source.add_bos else None
        if token is None:
            return BosChoice(None, None, "tokenizer_config")
        return BosChoice(token, _special_id(tokenizer, token, label), "tokenizer_config")
    before, _ = added_by_post_processor(tokenizer)
    if not before:
        return BosChoice(None, None, "post_processor" if source is not None else "none")
    if len(before) > 1:
        raise DataError(
            f"the post-processor of {label} puts {len(before)} tokens before every text "
            f"({[tokenizer.id_to_token(i) for i in before]}): no single BOS to take; name it with bos_token=, "
            "or bos_token=None for no BOS",
            step="build_vocab",
        )
    return BosChoice(tokenizer.id_to_token(before[0]), before[0], "post_processor")


def set_prompt_processor(tokenizer: Tokenizer, bos: BosChoice) -> None:
    """Makes ``tokenizer`` encode a text as the blocks hold a document start: the BOS (if any), no end-of-text.

    A post-processor that adds nothing already (a byte-level one that only trims offsets) is
    kept when there is no BOS.
    """
    if bos.token is None and added_by_post_processor(tokenizer) == ([], []):
        return
    if bos.token is None:
        tokenizer.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1")
        return
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos.token}:0 $A:0",
        pair=f"{bos.token}:0 $A:0 {bos.token}:1 $B:1",
        special_tokens=[(bos.token, int(bos.id if bos.id is not None else 0))],
    )
