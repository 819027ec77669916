"""The reference models, built from the data's dims: one per pipeline (see :mod:`lightning_order.pipelines`).

:class:`OrderedTextClassifier` (:mod:`.classifier`) for text classification,
:class:`OrderedCausalLM` (:mod:`.causal_lm`) for causal language modelling. Configs name them as
``lightning_order.models.OrderedTextClassifier`` or ``lightning_order.OrderedCausalLM``.
"""

from lightning_order.models.causal_lm import OrderedCausalLM
from lightning_order.models.classifier import OrderedTextClassifier

__all__ = ["OrderedCausalLM", "OrderedTextClassifier"]
