"""Text from token ids: incremental decoding and stop-string matching (plain Python, no torch).

Imported by the server, the Engine and the scheduler, so it imports none of them.
"""
