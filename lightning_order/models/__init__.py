"""The reference models, built from the data's dims: one per pipeline (see :mod:`lightning_order.pipelines`).

:class:`OrderedTextClassifier` (:mod:`.classifier`) for text classification,
:class:`OrderedCausalLM` (:mod:`.causal_lm`) for causal language modelling. Configs name them as
``lightning_order.models.OrderedTextClassifier`` or ``lightning_order.OrderedCausalLM``.
"""

from typing import TYPE_CHECKING

from lightning_order.lazy import lazy_exports

if TYPE_CHECKING:
    from lightning_order.models.causal_lm import OrderedCausalLM
    from lightning_order.models.classifier import OrderedTextClassifier

__all__ = ["OrderedCausalLM", "OrderedTextClassifier"]

# Lazy (PEP 562): a helper module of this package (hf.py, attention.py) imports without Lightning.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "OrderedCausalLM": "lightning_order.models.causal_lm",
        "OrderedTextClassifier": "lightning_order.models.classifier",
    },
)
