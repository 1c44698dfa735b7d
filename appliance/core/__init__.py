"""The service core: scheduling, admission, streaming, text streams, the runtime."""
