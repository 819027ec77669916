"""Tests of the top-level modules of lightning_order (order, ledger, rules, pipelines, recorder, ...)."""
