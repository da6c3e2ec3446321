"""The soak: one server under mixed, partly hostile load for minutes (run.py), its request kinds
(cases, hostile, volume; all by name in kinds.py), scheduler pauses and the report."""
