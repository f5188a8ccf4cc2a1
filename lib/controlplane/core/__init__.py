"""The functional core: pure, deterministic state machines.

Nothing under this package imports Spark, pandas, Arrow, Delta or YAML, reads a clock or draws
random numbers (enforced by import-linter and ruff's banned-api rule). Every step receives
``now_ms``; timers are named deadlines inside the state.
"""
