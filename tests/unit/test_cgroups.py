"""The memory a container's cgroup charges, read from its files (issue 27)."""


def test_memory_bytes_reads_v2_then_v1_and_unknown_is_none(tmp_path) -> None:
    from agent_supervisor.act.cgroups import memory_bytes

    v2, v1, gone = tmp_path / "v2", tmp_path / "v1", tmp_path / "gone"
    v2.mkdir()
    v1.mkdir()
    (v2 / "memory.current").write_text("3046703104\n")
    (v1 / "memory.usage_in_bytes").write_text("3046703104\n")
    assert memory_bytes((v2 / "cgroup.procs",)) == 3046703104
    assert memory_bytes((gone / "cgroup.procs", v1 / "cgroup.procs")) == 3046703104
    assert memory_bytes((gone / "cgroup.procs",)) is None
    assert memory_bytes(()) is None
