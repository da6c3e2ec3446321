"""Gemini's generateContent and explicit context caches (/v1beta/cachedContents)."""
