"""Batch APIs: a file of requests run in the background through the server's own routes, their
answers collected for later. OpenAI's Files and Batches (`/v1/files`, `/v1/batches`: a JSONL
input file, output and error files), Anthropic's Message Batches (`/v1/messages/batches`,
requests inline, JSONL results) and Gemini's batch mode (`models/{m}:batchGenerateContent`,
`batches/{id}`: requests and responses inline) share one runner (runner.py); each line is one
in-process call of the route it names (in_process.py), as its creator: the same key, tenant,
cache namespace, admission and usage as the same request sent alone."""
