"""What several test files share, one topic module each (its docstring says what it offers).

Test files import these from here, never from another test module or a conftest
(tests/unit/test_tests_housed.py checks it)."""
