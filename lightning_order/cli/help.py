"""The subcommands of ``lightning-order`` and their one-line help, written once.

The light dispatcher prints :data:`HELP`; ``audit``, ``graph`` and ``prepare`` take their
descriptions from :data:`COMMANDS`; LightningCLI's ``--help`` lists the same.
"""

from __future__ import annotations

from lightning_order.data.lm.spec import LM_SPEC

__all__ = ["COMMANDS", "HELP", "LIGHTNING_COMMANDS", "TOOLS", "pipeline_help"]

#: Every subcommand, with its one-line help.
COMMANDS: dict[str, str] = {
    "fit": "Train a model (LightningCLI), with the order checks on by default.",
    "validate": "Validate a model (LightningCLI).",
    "test": "Test a model (LightningCLI).",
    "predict": "Predict with a model (LightningCLI).",
    "prepare": "Run the data pipeline only and write the cache and its manifest (same config as fit).",
    "audit": "Re-check prepared pipelines (a cache root, one pipeline folder or a manifest) or a checkpoint's ledger.",
    "graph": "Print the pipeline DAG as Mermaid or DOT, with executed steps and violated edges.",
    "export": "Write a trained OrderedCausalLM and its tokenizer as a transformers model folder.",
}
#: The subcommands LightningCLI runs.
LIGHTNING_COMMANDS: tuple[str, ...] = ("fit", "validate", "test", "predict")
#: The subcommands of our own (dispatched before LightningCLI parses anything).
TOOLS: dict[str, str] = {name: text for name, text in COMMANDS.items() if name not in LIGHTNING_COMMANDS}

HELP = (
    "usage: lightning-order [-h] {" + ",".join(COMMANDS) + "} ...\n\n"
    "The right order of data preparation for PyTorch Lightning, by default and proven.\n\n"
    "subcommands:\n"
    + "".join(f"  {name:<10} {text}\n" for name, text in COMMANDS.items())
    + "\nEach subcommand lists its options: lightning-order <subcommand> --help\n"
    f"A language model's options: lightning-order fit --config {LM_SPEC.demo_config} --help\n"
)


def pipeline_help(command: str, shown: tuple[str, str], others: dict[str, tuple[str, str]]) -> str:
    """The description of ``lightning-order COMMAND --help``: whose options it lists, how to see the others'.

    ``fit --help`` without a config lists the default pipeline's DataModule and model; the options
    of another pipeline appear once its model is named (by a config or ``--model``).

    Args:
        command: the subcommand (``fit``, ``validate``...).
        shown: ``(title, model)`` of the pipeline whose options are listed.
        others: pipeline name -> ``(title, model)`` of every other pipeline.
    """
    from lightning_order.pipelines import PIPELINES  # light: the specs name their demo configs

    lines = [f"{COMMANDS[command]} The options below are for {shown[0]} ({shown[1]})."]
    for name, (title, model) in others.items():
        config = PIPELINES[name].demo_config if name in PIPELINES else None
        how = f"--config {config} --help, or " if config else ""
        lines.append(f"For {title}: lightning-order {command} {how}--model {model} --help.")
    return " ".join(lines)
