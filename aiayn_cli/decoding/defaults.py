"""Defaults of a translation run, in a module that imports nothing, so that `aiayn --help` shows them
without loading torch (`translator` uses the same names)."""

ON_LONG = ("truncate", "skip", "error")  # what to do with an input longer than the model's limit
MAX_TOKENS = 2048  # source tokens per batch, padding included
BATCH_SIZE = 64  # sentences per batch
ENGINES = ("torch", "ctranslate2")  # aiayn's decoder; the model converted once and run by CTranslate2
