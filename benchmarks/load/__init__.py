"""Load: the load generator and its clients, datasets and metrics, the shared-prefix workload on
the offline Engine, and the suite that runs them against every peer (its report and plots)."""
