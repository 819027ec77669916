"""Adapters of the validator to other trainers; each imports its framework only in its own module.

- :mod:`lightning_order.integrations.transformers`: ``OrderCallback``, a ``transformers.TrainerCallback``
  for the Hugging Face ``Trainer`` (and trainers built on it, such as trl's ``SFTTrainer``).

Nothing is imported here: ``import lightning_order.integrations`` never imports ``transformers``.
"""
