"""`GenerationTesterMixin`, which `test_modeling_common.py` imports from a file the sdist does not ship."""


class GenerationTesterMixin:
    pass
