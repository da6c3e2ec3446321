"""Routing across replicas: policies and approximate radix trees (used by `--dp` in the server)
and the standalone router process in front of separate servers
(`python -m radixrt.serve.router`)."""
