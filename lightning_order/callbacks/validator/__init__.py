"""``OrderValidator``, the checks it runs and what it gathers for them, in a handful of modules by concept.

The callback (:mod:`.callback`) only gathers and acts: Lightning's hooks, each a phase of a run.
What a phase needs beyond Lightning is the validator's core (:mod:`.phases`): what one run knows
between its hooks, the evidence a phase gathers, and the phase run through the check registry
(:mod:`lightning_order.checks.registry`), each judge a pure function, one verdict agreed across
ranks. Around it, the evidence by concept: reading a run's data without changing it
(:mod:`.reading`: budgets, the guard that puts back what a read moves, the items behind the loaders,
sampled batches, a stream's tokens), what the splits and ranks hold by content (:mod:`.content`),
train/validation overlap (:mod:`.overlap`), a language-modelling run (:mod:`.lm`), the
observation of step 1 (:mod:`.step_one`) and a resumed run (:mod:`.resume`).

Importing the package registers the built-in checks (each module registers its own), so every
process that can build an ``OrderValidator`` runs the same checks in the same order.
"""

from typing import TYPE_CHECKING

# Imported for what they register, in the order the checks were always registered; none of them
# imports Lightning (the plain loops' OrderGuard runs them too). The callback is imported lazily.
from lightning_order.callbacks.validator import content, lm, overlap, resume  # noqa: F401
from lightning_order.lazy import lazy_exports

if TYPE_CHECKING:
    from lightning_order.callbacks.validator.callback import OrderValidator

__all__ = ["OrderValidator"]

__getattr__, __dir__ = lazy_exports(__name__, {"OrderValidator": "lightning_order.callbacks.validator.callback"})
