"""radixrt frontend language."""
