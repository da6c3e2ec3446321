"""radixrt's own API: POST /generate (text or token ids, one prompt or a list)."""
