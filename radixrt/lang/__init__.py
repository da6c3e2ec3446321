"""The frontend language, re-exported: `radixrt_lang` (lang/ at the top of the repository,
its own distribution without torch or the runtime), plus the runtime's in-process Engine
backend, registered with it here so `rt.function(...).run(backend=engine)` works."""

from radixrt_lang import *  # noqa: F403 - the language's public names, listed in __all__
from radixrt_lang import __all__ as __all__
from radixrt_lang.backends import register_adapter

from radixrt.lang.engine_backend import EngineBackend

register_adapter(EngineBackend.accepts, EngineBackend)
