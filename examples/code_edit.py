"""Code edits with a predicted output: `gen(..., prediction=text)` hands the runtime the text
the answer will mostly repeat (here the file being edited). Its tokens are drafted and
checked several per decode step, so the answer comes sooner, and it is exactly the answer
without the prediction: a wrong prediction costs verifying rows, never a different output.

    python examples/code_edit.py [--url http://127.0.0.1:30000]
"""

from __future__ import annotations

import time

from radixrt_lang.launch import example_main

import radixrt as rt

CODE = '''def area(width, height):
    """The area of a width x height rectangle."""
    return width * height


def perimeter(width, height):
    """The perimeter of a width x height rectangle."""
    return 2 * (width + height)
'''
INSTRUCTION = "Rewrite this Python code, renaming the function area to surface:"


@rt.function
def edit(s, code, predicted=None):
    s += rt.user(f"{INSTRUCTION}\n\n{code}")
    s += rt.assistant(rt.gen("code", max_tokens=160, prediction=predicted))


def timed(backend: rt.BaseBackend, predicted: str | None) -> tuple[rt.ProgramState, float]:
    start = time.perf_counter()
    state = edit.run(code=CODE, predicted=predicted, backend=backend, temperature=0)
    return state, time.perf_counter() - start


def main(backend: rt.BaseBackend) -> None:
    timed(backend, None)  # the prompt into the cache: both runs below find it there
    plain, plain_s = timed(backend, None)
    predicted, predicted_s = timed(backend, CODE)
    assert predicted["code"] == plain["code"]  # the same answer, token for token
    meta = predicted.get_meta_info("code")
    print(predicted["code"])
    print(
        f"\n{meta['completion_tokens']} tokens: {plain_s:.2f} s without the prediction, "
        f"{predicted_s:.2f} s with it ({meta['prediction_accepted_tokens']} of its "
        f"{meta['prediction_tokens']} tokens kept as drafts)"
    )


if __name__ == "__main__":
    example_main(main, __doc__)
