"""Causal language modelling (:class:`~lightning_order.OrderedLMDataModule`, :data:`~lightning_order.LM_PIPELINE`).

* :mod:`.spec`: the pipeline's spec (its name, steps, checks, figures, demo config).
* :mod:`.config`: :class:`~.config.LMConfig`, the typed and validated arguments.
* the steps, one a module, each registered in :data:`~.registry.LM_STEPS`: :mod:`.load` (with
  :mod:`.documents` and :mod:`.corpus`, the built-in corpus), :mod:`.cleaning`,
  :mod:`.deduplication` (with :mod:`.shingles`, the words and their hashes, and :mod:`.clusters`,
  the exact and MinHash rule), :mod:`.split`, :mod:`.vocab` (with :mod:`.tokenizer`),
  :mod:`.encode`, :mod:`.pack` (with :mod:`.blocks`), :mod:`.shard`; :mod:`.tasks` holds their
  per-partition work items; :mod:`.steps` is the complete registry.
* :mod:`.prepare`: the order, the cache key and the preparation, without Lightning.
* :mod:`.artefacts`: the files of a prepared folder; :mod:`.figures`: what ``audit`` prints of a ledger.
* :mod:`.datamodule`: :class:`~lightning_order.OrderedLMDataModule`.
"""
