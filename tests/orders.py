"""The wrong orders the tests inject through ``OrderedDataModule(order=..., enforce=False)``.

Keyed by the rule code ``STANDARD_PIPELINE.check`` reports for each (among others).
"""

from __future__ import annotations

WRONG_ORDERS = {
    "vocab-before-clean": [
        "load",
        "build_vocab",
        "clean",
        "engineer_features",
        "split",
        "fit_features",
        "encode",
        "shard",
    ],
    "fit-before-split": [
        "load",
        "clean",
        "engineer_features",
        "fit_features",
        "split",
        "build_vocab",
        "encode",
        "shard",
    ],
    "shard-before-normalize": [
        "load",
        "clean",
        "engineer_features",
        "split",
        "build_vocab",
        "encode",
        "shard",
        "fit_features",
    ],
    "out-of-order": [
        "load",
        "split",
        "clean",
        "engineer_features",
        "fit_features",
        "build_vocab",
        "encode",
        "shard",
    ],
    "missing-step": ["load", "engineer_features", "split", "fit_features", "build_vocab", "encode", "shard"],
}
