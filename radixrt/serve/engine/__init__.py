"""The offline, in-process Engine: `from radixrt.serve.engine import Engine` (or `rt.Engine`)."""

from radixrt.serve.engine.engine import Engine

__all__ = ["Engine"]
