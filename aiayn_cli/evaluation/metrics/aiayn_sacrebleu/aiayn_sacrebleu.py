"""sacreBLEU (Post, 2018) as an `evaluate` metric that loads from this folder, with no network.

The numbers are `sacrebleu.BLEU(...).corpus_score(...)`, unchanged; the result carries sacreBLEU's
signature so that the score can be reported and reproduced.
"""

import evaluate
import sacrebleu

from aiayn_cli.evaluation.metrics import bleu_result, metric_info, reference_streams

_DESCRIPTION = """\
BLEU computed by sacreBLEU on detokenized text with its standard tokenization ('13a' by default),
so that scores are comparable across papers when reported with their signature."""

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    publisher = "Association for Computational Linguistics",
    url = "https://www.aclweb.org/anthology/W18-6319",
    pages = "186--191",
}"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): the hypotheses, detokenized.
    references (`list` of `str`, or `list` of `list` of `str`): for each prediction, its reference
        or its references (the same number for every prediction).
    tokenize (`str`): sacreBLEU tokenizer, '13a' by default.
    lowercase (`bool`): lowercase before scoring. Defaults to False.
    width (`int`): decimals in `formatted`. Defaults to 2.
Returns:
    name, score (0-100), counts, totals, precisions, bp, sys_len, ref_len, signature, verbose,
    formatted (sacreBLEU's own one-line report).
"""


class AiaynSacrebleu(evaluate.Metric):
    __doc__ = _DESCRIPTION + "\n" + _KWARGS_DESCRIPTION

    def _info(self):
        return metric_info(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION, "https://www.aclweb.org/anthology/W18-6319")

    def _compute(self, predictions, references, tokenize="13a", lowercase=False, width=2):
        bleu = sacrebleu.BLEU(tokenize=tokenize, lowercase=lowercase)
        result = bleu.corpus_score(predictions, reference_streams(references))
        signature = str(bleu.get_signature())
        return bleu_result(result, signature, width)
