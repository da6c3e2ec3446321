"""Tensor parallelism: the communicator, how heads and rows divide among ranks, the rank group."""
