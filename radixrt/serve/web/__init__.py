"""HTTP pieces with no knowledge of the runtime: responses, middleware, header names."""
