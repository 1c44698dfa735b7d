"""System tuning for latency: plan / apply / verify / revert."""
