"""The tokenizer over HTTP, in vLLM's shapes: POST /tokenize (text, or chat messages through
the chat template), POST /detokenize, GET /tokenizer_info."""
