"""The doors: protocol v1, Wyoming and HTTP on one shared connection policy."""
