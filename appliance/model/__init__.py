"""The voice model: finding and cutting voices, graph rewrites, inference engines."""
