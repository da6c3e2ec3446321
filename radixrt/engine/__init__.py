"""The offline, in-process Engine: `from radixrt.engine import Engine` (or `rt.Engine`)."""

from radixrt.engine.engine import Engine

__all__ = ["Engine"]
