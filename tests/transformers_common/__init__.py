"""transformers' common model tests, as released (see README.md); run by tests/test_transformers_common.py."""
