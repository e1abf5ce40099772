"""The supervisor's own probe lines, left out of the log views (issue 33).

The supervisor asks the engine ``/health``, ``/metrics``, ``/ping``, ``/version`` (and
llama-server's ``/slots``, ``/props``) every tick from the loopback address; the engine's
access log writes one line per request. In the recorded vLLM 0.32.0 core-died run
(tests/fixtures/engine_log/cpu-demo-0.32.0-mimo-mtp2-core-died.txt) they are 65 of 234
lines, and they push the lines that say why the engine died out of the pane and out of
every incident's log tail. vLLM can leave them out itself
(``--disable-access-log-for-endpoints /health,/metrics,/ping,/version``, as
policies/cpu-demo.yaml does); this filter covers the engines and policies without it.

Only a probe by the supervisor is left out: a GET of a probe path, from 127.0.0.1 or
::1, that answered 2xx. An agent's request, a probe from elsewhere and a failed probe
(``503`` from /health) stay. Shapes, from the engines' own sources:

- uvicorn (vLLM's API server): ``INFO:     127.0.0.1:44730 - "GET /health HTTP/1.1" 200 OK``
  (``uvicorn/logging.py`` AccessFormatter, ``%(client_addr)s - "%(request_line)s"
  %(status_code)s``);
- llama-server: ``srv  log_server_r: request: GET /health 127.0.0.1 200``
  (``tools/server/server.cpp`` ``log_server_request``), and its older JSON log
  ``{"msg":"request","remote_addr":"127.0.0.1",...,"status":200,"method":"GET",
  "path":"/health"}``.
"""

from __future__ import annotations

import re

__all__ = ["PROBE_PATHS", "hide_probe_lines", "is_probe_line", "tail_without_probes"]

#: The paths the supervisor's sensors GET (sense/names.py, sense/probes.py, the
#: llama-server profile's loop probe), with or without a query string.
PROBE_PATHS = ("health", "metrics", "ping", "version", "slots", "props")

_PATH = r"/(?:v1/)?(?:" + "|".join(PROBE_PATHS) + r")(?:\?[^\s\"]{0,200})?"
_LOCAL = r"(?:127\.0\.0\.1|::1|\[::1\]|localhost)"
_UVICORN = re.compile(r"(?<![\w.:])" + _LOCAL + r"(?::\d+)? - \"(?:GET|HEAD) " + _PATH
                      + r" HTTP/[\d.]+\" 2\d\d\b")
_LLAMA = re.compile(r"\brequest: (?:GET|HEAD) " + _PATH + " " + _LOCAL + r" 2\d\d\s*$")
_LLAMA_JSON = re.compile(r"\"remote_addr\":\s*\"" + _LOCAL + r"\"")
_LLAMA_JSON_PATH = re.compile(r"\"path\":\s*\"" + _PATH + r"\"")
_LLAMA_JSON_OK = re.compile(r"\"status\":\s*2\d\d\b")


def is_probe_line(line: str) -> bool:
    """Whether ``line`` is the access-log line of one of the supervisor's own probes."""
    if len(line) > 2000:                        # no access line is this long
        return False
    if _UVICORN.search(line) or _LLAMA.search(line):
        return True
    return bool('"msg":"request"' in line.replace(" ", "") and _LLAMA_JSON.search(line)
                and _LLAMA_JSON_PATH.search(line) and _LLAMA_JSON_OK.search(line))


def hide_probe_lines(text: str) -> tuple[str, int]:
    """``text`` without its probe lines, and how many were left out. Only whole lines
    (ended by a newline) are judged: an unfinished last line is kept as it is."""
    if not text:
        return text, 0
    lines = text.split("\n")
    last = lines.pop()                           # "" when the text ends with a newline
    kept = [line for line in lines if not is_probe_line(line)]
    hidden = len(lines) - len(kept)
    return "\n".join([*kept, last]), hidden


def tail_without_probes(text: str, lines: int) -> tuple[str, int]:
    """The last ``lines`` lines of ``text`` that are not probe lines, and how many probe
    lines lay among them (between the first line kept and the end)."""
    rows = text.split("\n")
    trailing = rows[-1] == ""
    if trailing:
        rows.pop()
    kept: list[str] = []
    hidden = 0
    for row in reversed(rows):
        if len(kept) >= lines:
            break
        if is_probe_line(row):
            hidden += 1
        else:
            kept.append(row)
    kept.reverse()
    if not kept:
        return "", hidden
    return "\n".join(kept) + ("\n" if trailing else ""), hidden
