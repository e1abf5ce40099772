"""Sense: read the engine, its processes and the box into one ``Sample`` per tick."""
