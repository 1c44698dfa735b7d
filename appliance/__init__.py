"""ttsd: a local streaming text-to-speech appliance daemon."""

__version__ = "0.1.0"
