"""Gemini's generateContent and explicit context caches (cachedContents), under /v1beta
and /v1."""
