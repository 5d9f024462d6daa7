"""Modules the tests share: runners in process and from the command line, stub endpoints, data paths.
Fixtures live in tests/conftest.py."""
