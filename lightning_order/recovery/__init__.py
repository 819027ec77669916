"""Pause a run that trains on wrongly ordered data, report what it cost, and recover its weights.

* :func:`pause` (:mod:`.emergency`) writes an *emergency checkpoint*: everything
  ``trainer.save_checkpoint`` stores plus a ``lightning_order`` entry with the ledger, the
  diagnoses or violations that caused the pause, the old vocabulary, and a :func:`waste_report`;
  then it stops every rank.
* :func:`transplant`, :func:`remap_embedding` and :func:`reinit_mismatched` (:mod:`.weights`)
  are the repairs, as plain functions; the transplant ("keep every weight whose name and shape
  match") is the one rule the others build on.
* :func:`choose_path` and :func:`advise` (:mod:`.decisions`) are pure decisions on the payload.
* :func:`recover` (:mod:`.plan`) reads a paused checkpoint safely and returns a
  :class:`RecoveryPlan`: what ``trainer.fit`` needs next, and whether to continue or restart.

Why warm-start instead of resuming: after a data-order error the prepared data changes (a new
vocabulary, new statistics), so the old token ids and the optimizer's moments refer to data that
no longer exists. Resuming the checkpoint as is would train on mismatched ids; starting from
scratch would throw away what the model learned. We keep every weight that still means the same
thing (same name, same shape), move embedding rows to their token's new id (a token's row is the
same vector whichever id it gets), give new tokens a fresh init, and rebuild the optimizer (its
moments belong to the old parameters' geometry). The schedule restarts; the weights do not.
"""

from lightning_order.cost import waste_report
from lightning_order.recovery.decisions import advise, choose_path
from lightning_order.recovery.emergency import pause
from lightning_order.recovery.plan import RecoveryPlan, recover
from lightning_order.recovery.weights import reinit_mismatched, remap_embedding, transplant

__all__ = [
    "RecoveryPlan",
    "advise",
    "choose_path",
    "pause",
    "recover",
    "reinit_mismatched",
    "remap_embedding",
    "transplant",
    "waste_report",
]
