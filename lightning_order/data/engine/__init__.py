"""The data engine every pipeline shares: steps, runner, cache, storage, inputs, keys and the base DataModule.

* :mod:`.runner`: data steps as registered plain functions (:class:`~.runner.StepRegistry`,
  :class:`~.runner.StepSpec`), the one runner, its dry run and the order resolution.
* :mod:`.cache`: one folder per pipeline fingerprint, a file lock, atomic publish, verification.
* :mod:`.storage`: content hashes of files, their verification, storage errors in one line.
* :mod:`.inputs`: what ``load`` will read (globs and folders expanded), its identity, diagnoses.
* :mod:`.reading`: the input read through :func:`datasets.load_dataset`, behind clear errors.
* :mod:`.keys`: the split keys and their hashes.
* :mod:`.tables`: Arrow batches in and out of the steps.
* :mod:`.loaders`: the dataloaders' seeded per-rank sampler.
* :mod:`.config`: the base config (fields every pipeline shares, validated once; the cache
  identity derived from the fields).
* :mod:`.arguments`: a DataModule's ``__init__`` built from its config dataclass.
* :mod:`.datamodule`: the base DataModule (cache, ``prepare_data``, the ``setup`` template).

A pipeline's own package (:mod:`lightning_order.data.text`, :mod:`lightning_order.data.lm`)
holds its config, steps, on-disk artefacts and DataModule. Nothing here imports torch except
:mod:`.loaders` and :mod:`.datamodule`.
"""
