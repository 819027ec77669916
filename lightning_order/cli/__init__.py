"""The ``lightning-order`` command: one light dispatcher, one LightningCLI, the tools.

:func:`main` (in :mod:`.dispatch`) answers ``--help``, ``audit``, ``graph`` and a ``prepare``
whose cache is finished without importing torch or Lightning, and hands ``fit``/``validate``/
``test``/``predict`` (and any other ``prepare``) to :class:`OrderCLI` (:mod:`.lightning`), the one
LightningCLI of every pipeline, configured by the pipeline's spec
(:mod:`lightning_order.pipelines`). :mod:`.tools` holds the ``audit`` and ``graph`` subcommands,
:mod:`.auditing` and :mod:`.rendering` what they print, :mod:`.console` the shared output helpers.

The names below are imported on first use, so ``from lightning_order.cli import main`` stays light.
"""

from __future__ import annotations

from lightning_order.lazy import lazy_exports

#: Public name -> the module of this package that defines it.
_LAZY: dict[str, str] = {
    "main": "lightning_order.cli.dispatch",
    "OrderCLI": "lightning_order.cli.lightning",
    "PrepareCLI": "lightning_order.cli.lightning",
    "spec_of_command": "lightning_order.cli.dispatch",
    "order_callbacks": "lightning_order.cli.lightning",
    "audit": "lightning_order.cli.auditing",
    "find_manifests": "lightning_order.cli.auditing",
    "ledger_table": "lightning_order.cli.console",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
