"""The chaos suite: the faults this product exists for, injected into the real CPU engine
under an agent-fleet load, each measured (detection, action, back to serving, failed
requests, the incident recorded)."""
