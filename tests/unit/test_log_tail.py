"""LogTail reads only what was appended, keeps a bounded tail, survives truncation."""

from __future__ import annotations

from pathlib import Path

from agent_supervisor.sense.log_tail import LogTail


def test_incremental_reads_and_partial_lines(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    tail = LogTail(log, max_lines=3)
    assert tail.poll() == [] and tail.text() == ""          # no file yet
    log.write_bytes(b"one\ntwo\nthr")
    assert tail.poll() == ["one", "two"]
    assert tail.text() == "one\ntwo\nthr"                   # unterminated line shown
    with open(log, "ab") as f:
        f.write(b"ee\nfour\nfive\n")
    assert tail.poll() == ["three", "four", "five"]
    assert tail.text() == "three\nfour\nfive"               # bounded to max_lines
    assert tail.poll() == []


def test_a_catch_up_leaves_the_new_lines_to_the_next_poll(tmp_path: Path) -> None:
    """An incident's tail (``catch_up``) between two ticks took the lines the tick's
    classifier then never saw: CI's llama-server GGML_ASSERT, logged 1.5 s before the
    abort, was restarted on the speculative rung."""
    log = tmp_path / "engine.log"
    tail = LogTail(log, max_lines=3)
    log.write_bytes(b"one\n")
    assert tail.poll() == ["one"]
    with open(log, "ab") as f:
        f.write(b"GGML_ASSERT(x) failed\ntwo\n")
    tail.catch_up()
    assert tail.text() == "one\nGGML_ASSERT(x) failed\ntwo"   # the incident sees them
    with open(log, "ab") as f:
        f.write(b"three\n")
    assert tail.poll() == ["GGML_ASSERT(x) failed", "two", "three"]
    assert tail.poll() == []
    tail.catch_up()
    assert tail.poll() == []
    with open(log, "ab") as f:                 # more than the kept lines: all wait
        f.write(b"".join(b"l%d\n" % i for i in range(5)))
    tail.catch_up()
    assert tail.text() == "l2\nl3\nl4"
    assert tail.poll() == ["l0", "l1", "l2", "l3", "l4"]


def test_a_flood_between_polls_keeps_what_one_poll_would_read(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    tail = LogTail(log, max_read_bytes=100)
    for i in range(3):                         # three incidents, 3 x 60 bytes, no tick
        with open(log, "ab") as f:
            f.write(b"".join(b"%d-%06d\n" % (i, n) for n in range(6)))
        tail.catch_up()
    got = tail.poll()
    assert got[-1] == "2-000005" and sum(len(x) + 1 for x in got) <= 100
    assert "0-000000" not in got               # the oldest went, as a poll skips bytes


def test_truncated_file_is_read_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_bytes(b"a long first life\n" * 10)
    tail = LogTail(log)
    tail.poll()
    log.write_bytes(b"new\n")
    assert tail.poll() == ["new"]


def test_a_flood_is_skipped_not_buffered(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_bytes(b"x" * 10_000 + b"\nlast line\n")
    tail = LogTail(log, max_read_bytes=100)
    assert tail.poll()[-1] == "last line"
    assert len(tail.text()) < 120


def test_invalid_utf8_is_replaced(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_bytes(b"bad \xff byte\n")
    assert LogTail(log).poll() == ["bad \ufffd byte"]


def test_issue_17_poll_survives_os_errors(tmp_path: Path, caplog) -> None:
    """A real OSError (EISDIR: the path is a directory; root ignores EACCES), then the
    file comes back and is read."""
    path = tmp_path / "engine.log"
    path.mkdir()
    tail = LogTail(path)
    assert tail.poll() == [] and tail.poll() == [] and tail.read_errors == 2
    assert caplog.text.count("cannot be read") == 1
    path.rmdir()
    path.write_text("INFO ready\n")
    assert tail.poll() == ["INFO ready"] and tail.read_errors == 0
