"""What a client of the scheduler builds from its output messages: the request's output so far
(`ReqOutput`), its stable text (`IncrementalDetokenizer`) and the result dict the Engine and the
server both return (`build_result`). Plain Python, no torch."""
