"""Decoding benchmarks: aiayn's decoder against its peers, another revision, a compiler, on a GPU, by operator.

    python benchmarks/bench_decode.py                                   # --mode engines: CPU tokens/s against
                                                                        #   generate() and CTranslate2
    python benchmarks/bench_decode.py --mode change --baseline main     # this checkout against a revision
    python benchmarks/bench_decode.py --mode compile                    # the step eager against torch.compile
    python benchmarks/bench_decode.py --mode gpu [--cache-paths]        # on a GPU: against generate(), or
                                                                        #   aiayn's two cache paths
    python benchmarks/bench_decode.py --mode split                      # where a decode's time goes
    python benchmarks/bench_decode.py --mode split --help               # a mode's options and what it does

Every mode decodes the same random batch with the same random weights, beam `--beams`, exactly
`--new-tokens` steps a sentence (`benchmarks/decoding/__init__.py`); each mode's module in
`benchmarks/decoding/` says what it measures and how. The options shared by every mode (`--dims`,
`--batch`, `--repeats`, ...) take each mode's own defaults; `--json FILE` writes the rows, and the modes
that keep results files (engines, compile, split) write `benchmarks/results/<name>.<machine>.json`
(`bench_decode`, `bench_decode_compile`, `bench_decode_split`) unless `--results FILE` says where.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiayn_cli.model.configuration_aiayn import PRESETS
from benchmarks import common, results

MODES = ("engines", "change", "compile", "gpu", "split")


def mode_module(mode: str):
    return importlib.import_module(f"benchmarks.decoding.{mode}")


def parser_for(mode: str) -> argparse.ArgumentParser:
    """The options every mode shares, with `mode`'s defaults, and `mode`'s own."""
    module = mode_module(mode)
    parser = argparse.ArgumentParser(
        description=f"{__doc__.splitlines()[0]}\n\n{module.__doc__}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--mode", choices=MODES, default="engines", help="what to measure (default: engines)")
    d = module.DEFAULTS
    parser.add_argument("--dims", nargs="+", default=d["dims"], choices=sorted(PRESETS))
    parser.add_argument("--vocab", type=int, default=None, help="vocabulary size (default: small 10000, base 37000)")
    parser.add_argument("--batch", type=int, nargs="+", default=d["batch"], help="sentences per batch")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument(
        "--new-tokens", type=int, default=d.get("new_tokens", 30), help="decoder steps per sentence (T)"
    )
    parser.add_argument("--min-src", type=int, default=15)
    parser.add_argument("--max-src", type=int, default=35)
    if "threads" in d:
        parser.add_argument("--threads", type=int, nargs="+", default=d["threads"], help="thread counts, each measured")
    if "dtype" in d:
        parser.add_argument("--dtype", nargs="+", default=d["dtype"], choices=module.DTYPES)
    parser.add_argument("--repeats", type=int, default=d["repeats"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    if module.RESULTS:
        results.add_argument(parser, module.RESULTS)
    module.add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the mode that `argv` (default: the command line) names; its rows."""
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--mode", choices=MODES, default="engines")
    mode = first.parse_known_args(argv)[0].mode
    module = mode_module(mode)
    parser = parser_for(mode)
    args = parser.parse_args(argv)
    common.at_least(parser, args, 1, *(n for n in ("batch", "beams", "new_tokens", "threads", "repeats") if n in args))
    if hasattr(module, "check"):
        module.check(parser, args)
    if module.RESULTS:
        recorder = results.Recorder(module.RESULTS, sys.argv if argv is None else [__file__, *argv])
    print(common.machine_line(), flush=True)
    figures = module.run(args)
    if args.json:
        args.json.write_text(json.dumps(figures["rows"], indent=2))
    if module.RESULTS:
        common.write_results(recorder, figures, args.results)
    return figures["rows"]


if __name__ == "__main__":
    main()
