"""The HTTP process compiles each constrained request's grammar before it is queued, with the
scheduler's backend and time limit, so a bad spec is a 400 and never reaches the scheduler."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from radixrt.config import SchedulerConfig
from radixrt.core import SamplingParams
from radixrt.grammar.base import GrammarError, GrammarSpec
from radixrt.grammar.compiler import GrammarCompiler, make_grammar_compiler
from radixrt.messages import ReadyMsg
from radixrt.server.protocol import BadRequestError


class GrammarChecker:
    """Owns this process's compile cache; the backend loads on the first constrained request."""

    def __init__(self, config: SchedulerConfig, tokenizer: Any, ready: ReadyMsg) -> None:
        self._args = (config, tokenizer, ready)
        self._compiler: GrammarCompiler | None = None

    @property
    def compiler(self) -> GrammarCompiler:
        if self._compiler is None:
            from radixrt.models.loader import eos_token_ids

            config, tokenizer, ready = self._args
            eos = eos_token_ids(Path(ready.model_path), tokenizer)
            self._compiler = make_grammar_compiler(config, tokenizer, ready.vocab_size, eos)
        return self._compiler

    async def check(self, params: list[SamplingParams]) -> None:
        """Compile every distinct spec in `params`; BadRequestError with the backend's message
        (or the time limit) for the first that fails."""
        specs = {s for p in params if (s := GrammarSpec.from_params(p)) is not None}
        for spec in specs:
            try:
                await asyncio.to_thread(self.compiler.compile, spec)
            except GrammarError as e:
                raise BadRequestError(str(e)) from None

    def close(self) -> None:
        if self._compiler is not None:
            self._compiler.shutdown()
