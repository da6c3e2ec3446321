"""RequestOutput: what the Engine hands back for one request, in the server's response shape."""

from __future__ import annotations

import queue
import time
from typing import Any

from radixrt.core import Req
from radixrt.server.detokenizer import IncrementalDetokenizer


class RequestOutput:
    """Follows one request; `result()` gives {text, output_ids, meta_info} as of now.

    `updates` receives False after each new token, True once finished, or an exception.
    Only the scheduler thread mutates `req`; readers copy lists before use.
    """

    def __init__(self, req: Req, tokenizer: Any) -> None:
        self.req = req
        self.tokenizer = tokenizer
        p = req.sampling_params
        self.detok = IncrementalDetokenizer(tokenizer, p.skip_special_tokens, p.stop)
        self.updates: queue.Queue[bool | BaseException] = queue.Queue()

    def result(self) -> dict[str, Any]:
        req = self.req
        reason = req.finish_reason
        ids = list(req.output_ids)
        if reason is not None:
            matched = reason.matched if isinstance(reason.matched, str) else None
            text = self.detok.finish(ids, matched)
        else:
            text = self.detok.update(ids)
        meta: dict[str, Any] = {
            "id": req.rid,
            "prompt_tokens": req.prompt_len,
            "completion_tokens": len(ids),
            "cached_tokens": req.cached_tokens,
            "finish_reason": reason.to_dict() if reason is not None else None,
            "e2e_latency": time.monotonic() - req.arrival_time,
        }
        p = req.sampling_params
        if p.return_logprob:
            n = len(ids)
            meta["output_token_logprobs"] = [
                (lp, t, None) for lp, t in zip(list(req.output_logprobs)[:n], ids)
            ]
            if p.top_logprobs_num > 0:
                meta["output_top_logprobs"] = [
                    [(lp, t, None) for lp, t in top] for top in list(req.output_top_logprobs)[:n]
                ]
            if p.logprob_start_len >= 0:
                first = p.logprob_start_len
                meta["input_token_logprobs"] = [
                    (lp, req.input_ids[first + i], None)
                    for i, lp in enumerate(list(req.input_logprobs))
                ]
                if p.top_logprobs_num > 0:
                    meta["input_top_logprobs"] = [
                        None if top is None else [(lp, t, None) for lp, t in top]
                        for top in list(req.input_top_logprobs)
                    ]
        return {"text": text, "output_ids": ids, "meta_info": meta}
