"""``OrderValidator`` and what it gathers, one concept per module.

The callback (:mod:`.callback`) only gathers and acts, keeping what one run knows between its
hooks in one state object (:mod:`.state`); every judgement is a pure function in
:mod:`lightning_order.checks`. Its gatherers: what a datamodule says (:mod:`.evidence`), sampled
batches (:mod:`.batches`), the items behind the loaders (:mod:`.items`), what a rank's datasets
hold (:mod:`.content`), label columns (:mod:`.labels`), train/validation overlap
(:mod:`.overlap`), the model's dims (:mod:`.model_dims`), the all-gather (:mod:`.gather`), an LM
run (:mod:`.lm`) and the data position (:mod:`.position`).
"""

from lightning_order.callbacks.validator.callback import OrderValidator

__all__ = ["OrderValidator"]
