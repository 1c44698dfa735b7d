"""Protocol v1: msgpack over a Unix socket (the native door)."""
