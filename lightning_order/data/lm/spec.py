"""The causal language-modelling pipeline's spec: the one place its facts are written.

:data:`NAME` is the pipeline's name (the manifest's ``info["pipeline"]``), importable without
anything else; :data:`LM_SPEC` is what :mod:`lightning_order.pipelines` registers. Its checks
beyond the order: the ledger's records (:func:`~lightning_order.checks.lm.check_lm_records`) and
the config (:func:`~lightning_order.checks.lm.check_lm_config`: ``eos=False``, ``pack-without-eos``),
which the preparation asks too.
"""

from __future__ import annotations

from lightning_order.order import LM_PIPELINE
from lightning_order.spec import PipelineSpec

__all__ = ["LM_SPEC", "NAME"]

#: The pipeline's name: the registry key and every manifest's ``info["pipeline"]``.
NAME = "lm"

LM_SPEC = PipelineSpec(
    name=NAME,
    pipeline=LM_PIPELINE,
    dims=("vocab_size", "padded_vocab_size", "block_size"),
    datamodule="lightning_order.data.lm.datamodule:OrderedLMDataModule",
    model="lightning_order.models.causal_lm:OrderedCausalLM",
    config="lightning_order.data.lm.config:LMConfig",
    preparation="lightning_order.data.lm.prepare:PREPARATION",
    steps="lightning_order.data.lm.steps:LM_STEPS",
    ledger_checks=(
        "lightning_order.checks.lm:check_lm_records",
        "lightning_order.checks.mixture:check_mixture_records",
    ),
    config_checks=("lightning_order.checks.lm:check_lm_config",),
    summary="lightning_order.data.lm.figures:print_lm_summary",
    figures="lightning_order.data.lm.figures:lm_figures",
    files=("train", "val", "tokenizer.json"),
    demo_config="configs/lm-demo.yaml",
    token_checks=True,
    pipeline_label="LM_PIPELINE",
    title="causal language modelling",
)
