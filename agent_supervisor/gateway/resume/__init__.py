"""Streams carried across an engine crash: how each API's stream is read, cut and continued.

- ``sse.py``: server-sent events as the gateway reads them (whole events, their JSON,
  ``StreamState``: what the client has been sent).
- ``resumption.py``: ``Resumption`` (how one request is continued), ``Dialect`` (how another
  API's stream is cut and rewritten), ``StreamTap`` (between the engine's stream and the
  client), and OpenAI's chat and text completions.
- ``messages.py``: Anthropic's ``/v1/messages``, continued on ``/v1/completions``.
- ``apis.py``: ``plan_stream`` (the plan for a path) and the Responses API.

The stream path that uses them (held connection, keep-alives, the continuation sent) is
agent_supervisor/gateway/streaming.py.
"""
