"""Causal language modelling (:class:`~lightning_order.OrderedLMDataModule`, :data:`~lightning_order.LM_PIPELINE`).

* :mod:`.config`: :class:`~.config.LMConfig`, the typed and validated arguments.
* :mod:`.steps`: the LM steps (:data:`~.steps.LM_STEPS`), with :mod:`.corpus` (the standard
  library's documentation, the built-in corpus) and :mod:`.dedup` (exact and MinHash).
* :mod:`.artefacts`: the files of a prepared folder.
* :mod:`.datamodule`: :class:`~lightning_order.OrderedLMDataModule`.
"""
