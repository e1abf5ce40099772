"""Decide: pure functions from a ``Window`` of Samples to one ``Decision``."""
