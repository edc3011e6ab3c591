"""TER, Translation Edit Rate (Snover et al., 2006), as computed by sacreBLEU, as an `evaluate`
metric that loads from this folder, with no network. Lower is better."""

import evaluate
import sacrebleu

from aiayn_cli.evaluation.metrics import metric_info, metric_result, reference_streams

_DESCRIPTION = """\
Translation Edit Rate: the number of edits (insertions, deletions, substitutions, shifts) that turn
the hypothesis into its closest reference, per reference word, computed by sacreBLEU (tercom)."""

_CITATION = """\
@inproceedings{snover-etal-2006-study,
    title = "A Study of Translation Edit Rate with Targeted Human Annotation",
    author = "Snover, Matthew and Dorr, Bonnie and Schwartz, Rich and Micciulla, Linnea and Makhoul, John",
    booktitle = "Proceedings of the 7th Conference of the Association for Machine Translation in the Americas",
    year = "2006",
    url = "https://aclanthology.org/2006.amta-papers.25",
    pages = "223--231",
}"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): the hypotheses.
    references (`list` of `str`, or `list` of `list` of `str`): for each prediction, its reference
        or its references (the same number for every prediction).
    normalized (`bool`): tercom's normalization. Defaults to False.
    no_punct (`bool`): remove punctuation. Defaults to False.
    asian_support (`bool`): tokenize Asian scripts. Defaults to False.
    case_sensitive (`bool`): Defaults to False.
    width (`int`): decimals in `formatted`. Defaults to 2.
Returns:
    name, score (0-100 and more, lower is better), num_edits, ref_length, signature,
    formatted (sacreBLEU's own one-line report).
"""


class AiaynTer(evaluate.Metric):
    __doc__ = _DESCRIPTION + "\n" + _KWARGS_DESCRIPTION

    def _info(self):
        return metric_info(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION, "https://aclanthology.org/2006.amta-papers.25")

    def _compute(
        self,
        predictions,
        references,
        normalized=False,
        no_punct=False,
        asian_support=False,
        case_sensitive=False,
        width=2,
    ):
        ter = sacrebleu.TER(
            normalized=normalized, no_punct=no_punct, asian_support=asian_support, case_sensitive=case_sensitive
        )
        result = ter.corpus_score(predictions, reference_streams(references))
        return metric_result(result, str(ter.get_signature()), width, "num_edits", "ref_length")
