"""Workload profiles for calibration: which speculation wins depends on the work.

On the same NVFP4 weights on a GB10, DSpark beat MTP on code (51.5 vs 34.5 tokens/s) while
MTP won long essays (24.1 vs 18.3), and in thinking mode the gain shrinks (issue 13's field
report): ``supervisor calibrate --profiles`` measures each rung on each of these.

A profile is the first asks of a session, the turns that follow, and the answer length.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PROFILES", "Profile"]


@dataclass(frozen=True, slots=True)
class Profile:
    """One kind of work: ``asks`` open a session, ``follow_ups`` continue it."""

    name: str
    asks: tuple[str, ...]
    follow_ups: tuple[str, ...]
    max_tokens: int


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("agent",
            ("I will read the file in main.py and then patch the function in utils.py.",
             "Run the tests and fix the failing one in store.py.",
             "Search the log for the error and write the fix in server.py."),
            ('{"name": "read_file", "result": "def main():\\n    return run(config)\\n"}',
             '{"name": "run_tests", "result": "3 passed, 1 failed: test_store.py::test_update"}',
             '{"name": "grep", "result": "server.py:41: timeout = 30\\nutils.py:12: retries = 3"}',
             '{"name": "list_dir", "result": "main.py server.py utils.py README.md policy.yaml"}'),
            96),
    Profile("code",
            ("Write a Python function that parses an ISO 8601 date and returns a datetime.",
             "Implement a thread-safe LRU cache class in Python with get and put.",
             "Write a SQL query that returns the ten customers with the most orders."),
            ("Add type hints and a docstring.", "Now write unit tests for it with pytest.",
             "Refactor it to handle errors explicitly."),
            256),
    Profile("short_chat",
            ("What is the capital of Australia?", "How many days are in a leap year?",
             "Give me a synonym for quick."),
            ("Thanks. And another one?", "Why?", "Say it in one sentence."),
            48),
    Profile("long_form",
            ("Write a long essay on the history of the printing press and its effects.",
             "Write a detailed report on the causes of the 1929 stock market crash.",
             "Write a long story about a lighthouse keeper who finds a message in a bottle."),
            ("Continue, in the same style, for several more paragraphs.",
             "Expand the last section in more depth."),
            512),
    Profile("thinking",
            ("Think step by step: a train leaves at 3 pm at 80 km/h, another at 4 pm at 100 "
             "km/h on the same track; when does the second catch up?",
             "Reason carefully: is 391 a prime number? Show your reasoning.",
             "Think it through: how many weighings find the odd ball among 12 with a balance?"),
            ("Check your reasoning once more and correct any mistake.",
             "Explain the key step again, more carefully."),
            384),
)}
