"""Text classification (:class:`~lightning_order.OrderedDataModule`, :data:`~lightning_order.STANDARD_PIPELINE`).

* :mod:`.config`: :class:`~.config.DataConfig`, the typed and validated arguments.
* the steps, each registered in :data:`~.registry.STEPS` by the module that owns its maths:
  :mod:`.load` (with :mod:`.demo`, the demo corpus), :mod:`.cleaning` (with :mod:`.normalise`,
  the one definition of a cleaned text), :mod:`.features`, :mod:`.split`, :mod:`.vocab`,
  :mod:`.encode`, :mod:`.shard`; :mod:`.arrow` holds their vectorised kernels; :mod:`.steps` is
  the complete registry.
* :mod:`.prepare`: the order, the cache key and the preparation, without Lightning.
* :mod:`.artefacts`: the files of a prepared folder; :mod:`.batches`: the batch contract.
* :mod:`.datamodule`: :class:`~lightning_order.OrderedDataModule`.
"""
