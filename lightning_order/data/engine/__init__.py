"""The data engine every pipeline shares: steps, runner, cache, storage, inputs, keys and the base DataModule.

* :mod:`.registry`: each data step's function and declarations (:class:`~.registry.StepRegistry`,
  :class:`~.registry.StepSpec`), bound to the pipeline that orders them.
* :mod:`.runner`: data steps as plain functions of (:class:`~.runner.StepContext`,
  :class:`~.runner.DataState`) returning a :class:`~.runner.StepResult`, the one runner, its
  dry run and the order resolution.
* :mod:`.preparation`: a pipeline's preparation derived from its declarations, the default cache
  key and the manifest written in one call (what a pipeline of a user's own subclasses).
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
