"""Engine micro-benchmarks: prefill and decode steps against the machine's roofline."""
