"""The public names of the package are pinned (httpx's test_exported_members)."""

import agent_supervisor


def test_exported_members() -> None:
    assert agent_supervisor.__all__ == ["Policy", "PolicyError", "SupervisorError",
                                        "__version__", "load_policy", "load_policy_file"]
    for name in agent_supervisor.__all__:
        assert hasattr(agent_supervisor, name)
