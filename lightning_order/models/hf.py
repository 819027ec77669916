"""What a ``transformers`` causal LM expects of a batch, read off a module without importing ``transformers``.

``transformers``' causal LMs (``GPT2LMHeadModel``, ``LlamaForCausalLM``, every ``*ForCausalLM``)
take ``labels`` equal to ``input_ids`` and shift them inside their loss; labels already shifted by
one train them on the token after next. Whether a module is such a model, or wraps one as itself,
its ``model`` attribute or a direct child, is read from ``sys.modules``: ``transformers`` is never
imported here (a module can only be one of its models once it is loaded), so a run without it pays
nothing. The class name decides "causal LM" (``*ForCausalLM``, ``*LMHeadModel``): the auto-mapping
``transformers`` keeps of them needs its modelling registry imported.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["CAUSAL_LM_SUFFIXES", "hf_causal_lm"]

#: Class-name endings of ``transformers`` models whose loss shifts the labels itself.
CAUSAL_LM_SUFFIXES: tuple[str, ...] = ("ForCausalLM", "LMHeadModel")


def _is_causal_lm(candidate: Any, base: type) -> bool:
    if not isinstance(candidate, base):
        return False
    # A user's subclass (``class MyGPT(GPT2LMHeadModel)``) is still one: look along its classes.
    return any(cls.__name__.endswith(CAUSAL_LM_SUFFIXES) for cls in type(candidate).__mro__)


def hf_causal_lm(module: Any) -> Any | None:
    """The ``transformers`` causal LM that ``module`` is, or holds as ``module.model`` or a direct child.

    Args:
        module: a LightningModule, a ``torch.nn.Module`` or ``None``.

    Returns:
        The model, or ``None`` (also when ``transformers`` was never imported).
    """
    modelling = sys.modules.get("transformers.modeling_utils")
    base = getattr(modelling, "PreTrainedModel", None)
    if module is None or not isinstance(base, type):
        return None
    children = module.children() if callable(getattr(module, "children", None)) else ()
    for candidate in (module, getattr(module, "model", None), *children):
        if candidate is not None and _is_causal_lm(candidate, base):
            return candidate
    return None
