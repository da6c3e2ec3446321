"""radixrt on Ray Serve: one radixrt server per replica, behind an ingress, routed by
radixrt's cache-aware policy (`pip install 'radixrt[ray]'`; `python -m radixrt.serve.ray serve`).
Nothing here is imported by the rest of radixrt."""
