"""Clients of protocol v1: the library, ttsctl, the demo, sd_ttsd."""
