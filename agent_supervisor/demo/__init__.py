"""The embedded default: the CPU build of vLLM in its own environment and tiny local models."""
