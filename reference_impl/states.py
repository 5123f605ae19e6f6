"""The names schema.sql constrains, for Python to import instead of copying.

schema.sql defines them (the state_transitions table and the CHECK constraints); this module only names
them for Python, and tests/test_schema.py fails when the two disagree. The catch-up and overlap policies
live with their logic in policies.py, checked by the same test.
"""

from __future__ import annotations

OCCURRENCE_OPEN = ("waiting", "ready", "running")
OCCURRENCE_TERMINAL = ("succeeded", "dead", "skipped", "cancelled")
OCCURRENCE_STATES = OCCURRENCE_OPEN + OCCURRENCE_TERMINAL
ATTEMPT_STATES = ("running", "succeeded", "failed", "lost", "cancelled", "timed_out")
TRIGGERS = ("schedule", "manual")  # how an occurrence came to be: its fire time, or someone asking
SCHEDULE_KINDS = ("once", "cron")
POOLS = ("short", "long")
DST_GAP = ("shift", "skip")
DST_OVERLAP = ("first", "both")
