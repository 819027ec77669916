"""The ``lightning-order`` command (placeholder until the CLI issue lands: prints the pipeline)."""

from __future__ import annotations

import sys

from lightning_order.order import STANDARD_PIPELINE


def main(argv: list[str] | None = None) -> int:
    """Prints the mandated order."""
    del argv
    for number, step in enumerate(STANDARD_PIPELINE, start=1):
        print(f"{number:>2}. {step.name:<22} {step.kind:<10} requires: {', '.join(step.requires) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
