"""The gateway: an OpenAI-compatible reverse proxy in front of the engine, with admission
control per mode, so that agents never notice a mode switch."""
