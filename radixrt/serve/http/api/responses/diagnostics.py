"""A Responses turn's prompt fingerprint for cache diagnostics
(`prompt_cache_options.comparison_response_id`; the rule: radixrt/serve/http/diagnostics/): its
instructions are its system, the whole conversation (earlier turns included) its messages."""

from __future__ import annotations

from radixrt.serve.http.api.responses.prompt import Prompt
from radixrt.serve.http.api.responses.protocol import ResponsesRequest
from radixrt.serve.http.diagnostics import PromptRecord, fingerprint


def prompt_record(resp_id: str, req: ResponsesRequest, prompt: Prompt) -> PromptRecord:
    """The turn's fingerprint under `resp_id`, and the comparison it asks for (on the
    tokenizer thread: it hashes the prompt's tokens)."""
    fp = fingerprint(req.model, req.instructions, req.tools or [], prompt.messages, prompt.ids)
    options = req.prompt_cache_options
    compare_to = None if options is None else options.comparison_response_id
    return PromptRecord(resp_id, fp, compare_to is not None, compare_to)
