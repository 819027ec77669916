"""The validator's checks for training loops without a Lightning Trainer (plain PyTorch, Fabric, others).

:mod:`.adapter` is the one module that reaches into the validator's internals: a run view that
stands in for the Trainer, the phases the callback runs before step 1, and the step-1 judgement.
:class:`~lightning_order.guard.OrderGuard` and
:class:`~lightning_order.integrations.transformers.OrderCallback` are thin shells over it.
Nothing is imported here, so ``import lightning_order.guard`` stays light until a guard checks.
"""
