"""The world: scenario configuration, channel, compute and acceptance profiles."""
