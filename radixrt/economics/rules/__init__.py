"""Each provider's prompt-caching rules as code: which prompt tokens a request is billed as
cache reads, writes and plain input, given what earlier requests left cached."""
