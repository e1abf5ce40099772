"""Act: the launcher (sole owner of the engine process) and the executor of Decisions."""
