"""The Anthropic Messages API (/v1/messages) with cache_control breakpoints as pins."""
