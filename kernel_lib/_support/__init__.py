"""stdlib-only helpers."""
