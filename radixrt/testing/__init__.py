"""Fixtures the tests and the GPU check share: synthetic KV pools and batches, and a driver that
runs sequences straight through a ModelRunner. Not used at run time."""
