"""Pure checks: functions of plain data (ledger records, small tensors, dims) -> list[Violation].

The callbacks gather the data and act on the result; nothing here touches a Trainer.
"""

__all__: list[str] = []
