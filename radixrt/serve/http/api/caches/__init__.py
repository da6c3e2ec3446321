"""The native prompt caches: named, pinned prefixes (/v1/caches) and why a prompt misses the
prefix cache (/v1/cache/explain)."""
