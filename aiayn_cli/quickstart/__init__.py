"""The quickstart: an English->German corpus generated from a small grammar (`synthetic`, `lexicon`)
and the whole pipeline on it in a few minutes (`pipeline`)."""
