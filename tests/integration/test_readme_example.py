"""The README's training example runs as written (``trainer.fit`` on a small reviews.csv), under both
Lightning namespaces.

The README's commands and its imports: tests/unit/test_readme.py.
"""

from __future__ import annotations

import pytest
from helpers import readme_training_example


def test_readme_training_example_runs_as_written(tmp_path, monkeypatch):
    """The 'In your own code' example, verbatim, on a small reviews.csv the test writes."""
    namespace = readme_training_example(tmp_path, monkeypatch)
    trainer, dm = namespace["trainer"], namespace["dm"]
    assert trainer.global_step > 0
    assert trainer.state.finished
    assert dm.dims["num_features"] == 2 + len(dm.engineered_features)


@pytest.mark.slow
def test_readme_example_runs_under_lightning_pytorch(tmp_path, monkeypatch):
    """The README's training example with ``import lightning.pytorch as pl`` instead."""
    namespace = readme_training_example(tmp_path, monkeypatch, namespace_module="lightning.pytorch")
    trainer = namespace["trainer"]
    assert type(trainer).__module__.startswith("lightning.pytorch")
    assert trainer.global_step > 0 and trainer.state.finished
