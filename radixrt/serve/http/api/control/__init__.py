"""The server's own endpoints: health, model and server info, usage, metrics, cache flush and
request abort."""
