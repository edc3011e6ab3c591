"""chrF (Popović, 2015) as computed by sacreBLEU, as an `evaluate` metric that loads from this
folder, with no network. `word_order=2` gives chrF++ (Popović, 2017)."""

import evaluate
import sacrebleu

from aiayn_cli.evaluation.metrics import metric_info, metric_result, reference_streams

_DESCRIPTION = """\
Character n-gram F-score (chrF, beta=2 and character order 6 by default) computed by sacreBLEU."""

_CITATION = """\
@inproceedings{popovic-2015-chrf,
    title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation",
    author = "Popovi{\\'c}, Maja",
    booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation",
    year = "2015",
    url = "https://aclanthology.org/W15-3049",
    pages = "392--395",
}"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): the hypotheses.
    references (`list` of `str`, or `list` of `list` of `str`): for each prediction, its reference
        or its references (the same number for every prediction).
    char_order (`int`): character n-gram order. Defaults to 6.
    word_order (`int`): word n-gram order; 2 gives chrF++. Defaults to 0.
    beta (`int`): recall weight. Defaults to 2.
    lowercase (`bool`): case-insensitive. Defaults to False.
    whitespace (`bool`): count whitespace in character n-grams. Defaults to False.
    width (`int`): decimals in `formatted`. Defaults to 2.
Returns:
    name, score (0-100), signature, formatted (sacreBLEU's own one-line report).
"""


class AiaynChrf(evaluate.Metric):
    __doc__ = _DESCRIPTION + "\n" + _KWARGS_DESCRIPTION

    def _info(self):
        return metric_info(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION, "https://aclanthology.org/W15-3049")

    def _compute(
        self, predictions, references, char_order=6, word_order=0, beta=2, lowercase=False, whitespace=False, width=2
    ):
        chrf = sacrebleu.CHRF(
            char_order=char_order, word_order=word_order, beta=beta, lowercase=lowercase, whitespace=whitespace
        )
        result = chrf.corpus_score(predictions, reference_streams(references))
        return metric_result(result, str(chrf.get_signature()), width)
