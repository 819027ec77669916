"""The text-classification pipeline's spec: the one place its facts are written.

:data:`NAME` is the pipeline's name (the manifest's ``info["pipeline"]``), importable without
anything else; :data:`TEXT_SPEC` is what :mod:`lightning_order.pipelines` registers.
"""

from __future__ import annotations

from lightning_order.order import STANDARD_PIPELINE
from lightning_order.spec import PipelineSpec

__all__ = ["NAME", "TEXT_SPEC"]

#: The pipeline's name: the registry key and every manifest's ``info["pipeline"]``.
NAME = "standard"

TEXT_SPEC = PipelineSpec(
    name=NAME,
    pipeline=STANDARD_PIPELINE,
    dims=("vocab_size", "num_features", "num_classes", "max_length"),
    datamodule="lightning_order.data.text.datamodule:OrderedDataModule",
    model="lightning_order.models.classifier:OrderedTextClassifier",
    config="lightning_order.data.text.config:DataConfig",
    preparation="lightning_order.data.text.prepare:PREPARATION",
    steps="lightning_order.data.text.steps:STEPS",
    files=("train", "val", "tokenizer.json"),
    demo_config="configs/demo.yaml",
    pipeline_label="STANDARD_PIPELINE",
    title="text classification",
)
