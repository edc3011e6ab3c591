"""transformers' common model tests, as released (see README.md); run by tests/model/test_transformers_common.py."""
