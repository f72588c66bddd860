"""The shared fixtures live in lokg.testing.fixtures; this registers them for every test."""

pytest_plugins = ["lokg.testing.fixtures"]
