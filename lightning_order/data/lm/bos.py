"""BOS, decided once: which token (if any) starts every document, in the blocks and in the tokenizer users get.

What a document looks like to the model is one decision, recorded by ``build_vocab``: its start
(a BOS token or nothing) and its end (the end-of-text token). ``encode`` puts the BOS before
every document, and the tokenizer handed to users (``dm.tokenizer``, ``dm.hf_tokenizer``, the
folder saved beside checkpoints) gets a post-processor that adds exactly that BOS and no
end-of-text, so a prompt encodes as the blocks hold a document start.

``bos_token="auto"`` (the default) takes what the supplied tokenizer already does: the single
special token its post-processor puts before a text (``<s> $A </s>`` gives ``<s>``), which is
what ``AutoTokenizer`` on the same folder adds (``transformers`` ignores a config's
``add_bos_token`` when a ``tokenizer.json`` is there); a trained byte-level BPE has none. That
start must be able to mark a document's start: the end-of-text token, or an ordinary token that
text also encodes to, is refused. ``None`` is no BOS; a token string is that token (declared by
a trained BPE, required as a special token of a supplied one).
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

    ``origin`` is ``"config"`` (``bos_token`` named it), ``"post_processor"`` (what the supplied
    post-processor adds) or ``"none"``.
    """

    token: str | None
    id: int | None
    origin: str


def added_by_post_processor(tokenizer: Tokenizer) -> tuple[list[int], list[int]]:
    """The ids ``tokenizer``'s post-processor puts before and after a single text (``[], []``: none).

    Read from the encoding's special-tokens mask, which marks what the post-processor added even
    when it is a token the text also encodes to (``a $A`` around the probe ``a``); where the mask
    does not frame the text, the text's ids are searched for.
    """
    plain = tokenizer.encode(_PROBE, add_special_tokens=False).ids
    encoding = tokenizer.encode(_PROBE, add_special_tokens=True)
    full, mask = encoding.ids, encoding.special_tokens_mask
    lead = next((i for i, m in enumerate(mask) if not m), len(mask))
    trail = len(full) - next((i for i, m in enumerate(reversed(mask)) if not m), len(mask))
    if full[lead:trail] == plain:
        return list(full[:lead]), list(full[trail:])
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
    requested: str | None,
    tokenizer: Tokenizer,
    source: TokenizerSource | None,
    label: str,
    *,
    eos_token: str | None = None,
) -> BosChoice:
    """The BOS for ``requested`` (``"auto"``, ``None`` or a token; see the module docstring).

    Args:
        requested: the config's ``bos_token``.
        tokenizer: the tokenizer (supplied, or trained with the token declared).
        source: the supplied tokenizer's snapshot, or ``None`` (a trained one, or a ``tokenizer_file``).
        label: how messages name the tokenizer.
        eos_token: the end-of-text token, which an ``"auto"`` BOS may not be (``None``: not checked).

    Raises:
        DataError: the token is not a special token of the tokenizer, or the post-processor puts
            several tokens before a text, the end-of-text token or an ordinary token (no BOS to
            take: name one with ``bos_token=``).
    """
    if requested is None:
        return BosChoice(None, None, "none")
    if requested != AUTO:
        return BosChoice(requested, _special_id(tokenizer, requested, label), "config")
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
    token = str(tokenizer.id_to_token(before[0]))
    if token == eos_token:
        raise DataError(
            f"the post-processor of {label} puts the end-of-text token {token!r} before every text: as a BOS "
            "a document's start would look like the end of the one before; pass bos_token=None for no BOS, "
            "or name another special token with bos_token=",
            step="build_vocab",
        )
    special = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
    if token not in special:
        raise DataError(
            f"the post-processor of {label} puts {token!r}, an ordinary (non-special) token, before every "
            "text: text encodes to it too, so it cannot mark a document's start; pass bos_token=None for no "
            "BOS, or name a special token with bos_token=",
            step="build_vocab",
        )
    return BosChoice(token, before[0], "post_processor")


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
