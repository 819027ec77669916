"""``OrderValidator``, the checks it runs and what it gathers for them.

The callback (:mod:`.callback`) only gathers and acts, keeping what one run knows between its
hooks in one state object (:mod:`.state`); at each phase it runs what the check registry
(:mod:`lightning_order.checks.registry`) holds, each judge a pure function. Around it: what every
check reads (:mod:`.evidence`: the datamodule's word, the items behind its loaders, the model's
dims), sampled batches (:mod:`.batches`) read within a budget (:mod:`.budget`) without moving
the run (:mod:`.peek`), rank agreement and the phase runner (:mod:`.gather`) and a resumed run
(:mod:`.resume`: the restore, the content sample, the data position). Each other module gathers
for its own checks and registers them: the splits' content (:mod:`.content`), train/validation
overlap (:mod:`.overlap`, with :mod:`.tokens` and :mod:`.arrow_blocks`), label encoding
(:mod:`.labels`), what each rank reads (:mod:`.rank_reads`), rows the train loader's workers serve twice
(:mod:`.served`), instruction rows that keep none of their answer (:mod:`.answers`), an LM run (:mod:`.lm`, with
:mod:`.lm_tokens`, :mod:`.documents` and :mod:`.tokenizer_fit`).

Importing the package registers the built-in checks (the modules below), so every process that
can build an ``OrderValidator`` runs the same checks in the same order.
"""

# Imported for what they register (callback.py imports the other modules that register checks).
from lightning_order.callbacks.validator import answers, labels, overlap, rank_reads, served  # noqa: F401
from lightning_order.callbacks.validator.callback import OrderValidator

__all__ = ["OrderValidator"]
