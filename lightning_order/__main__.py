"""``python -m lightning_order``: the same as the ``lightning-order`` command."""

import sys

from lightning_order.cli import main

if __name__ == "__main__":
    sys.exit(main())
