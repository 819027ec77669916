"""The subcommands of ``lightning-order`` and their one-line help, written once.

The light dispatcher prints :data:`HELP`; ``audit``, ``graph`` and ``prepare`` take their
descriptions from :data:`COMMANDS`; LightningCLI's ``--help`` lists the same.
"""

from __future__ import annotations

__all__ = ["COMMANDS", "HELP", "LIGHTNING_COMMANDS", "TOOLS"]

#: Every subcommand, with its one-line help.
COMMANDS: dict[str, str] = {
    "fit": "Train a model (LightningCLI), with the order checks on by default.",
    "validate": "Validate a model (LightningCLI).",
    "test": "Test a model (LightningCLI).",
    "predict": "Predict with a model (LightningCLI).",
    "prepare": "Run the data pipeline only and write the cache and its manifest (same config as fit).",
    "audit": "Re-check prepared pipelines (a cache root, one pipeline folder or a manifest).",
    "graph": "Print the pipeline DAG as Mermaid or DOT, with executed steps and violated edges.",
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
    "A language model's options: lightning-order fit --config configs/lm-demo.yaml --help\n"
)
