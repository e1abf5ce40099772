"""The public names of the package are pinned (httpx's test_exported_members)."""

import supervisor


def test_exported_members() -> None:
    assert supervisor.__all__ == ["Policy", "PolicyError", "SupervisorError", "__version__",
                                  "load_policy", "load_policy_file"]
    for name in supervisor.__all__:
        assert hasattr(supervisor, name)
