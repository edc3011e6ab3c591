"""Tokenized BLEU with compound splitting: the convention behind the paper's 27.3 / 28.4 BLEU
(Vaswani et al., 2017, Table 2), as an `evaluate` metric that loads from this folder, with no network.

Both sides are tokenized with the Moses tokenizer and hyphenated compounds are split
(`gut-aussehende` -> `gut ##AT##-##AT## aussehende`), then BLEU is computed as `multi-bleu.perl`
does (whitespace tokens, no smoothing). This number depends on the tokenization and is NOT
comparable with sacreBLEU, nor with the same metric under another tokenizer.

With `lowercase=True, compounds=False` it is the other tokenized BLEU that papers report, on
Multi30k in particular (Revisit-MMT's 41.02, for one): Moses-tokenized text, lowercased,
`multi-bleu.perl -lc`.
"""

import evaluate
import sacrebleu
import sacremoses

from aiayn_cli.evaluation.metrics import (
    bleu_result,
    metric_info,
    moses_tokenize,
    paper_bleu_tokenize,
    reference_streams,
)

_DESCRIPTION = """\
Tokenized BLEU with compound splitting (Moses replace-unicode-punctuation + tokenizer -l LANG,
##AT##-##AT## compound splitting, multi-bleu), as in tensor2tensor's get_ende_bleu.sh.
NOT comparable with sacreBLEU."""

_CITATION = """\
@inproceedings{vaswani2017attention,
    title = "Attention Is All You Need",
    author = "Vaswani, Ashish and Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and Gomez, Aidan N. and Kaiser, {\\L}ukasz and Polosukhin, Illia",
    booktitle = "Advances in Neural Information Processing Systems 30",
    year = "2017",
    pages = "5998--6008",
}"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): the hypotheses, detokenized.
    references (`list` of `str`, or `list` of `list` of `str`): for each prediction, its reference
        or its references (the same number for every prediction), detokenized.
    lang (`str`): language of the text, for the Moses tokenizer (e.g. 'de').
    lowercase (`bool`): lowercase both sides after tokenizing (multi-bleu -lc). Defaults to False.
    compounds (`bool`): split hyphenated compounds (##AT##-##AT##). Defaults to True.
    width (`int`): decimals in `formatted`. Defaults to 2.
Returns:
    name, score (0-100), counts, totals, precisions, bp, sys_len, ref_len, signature, verbose,
    formatted, note.
"""

NAME = "tokenized BLEU"
NOTE = "tokenized BLEU with compound splitting, the paper's convention: NOT comparable with sacreBLEU"
LOWERCASE_NAME = "BLEU lowercased, tokenized"
LOWERCASE_NOTE = (
    "BLEU on lowercased, Moses-tokenized text (multi-bleu -lc), as papers on Multi30k report it: comparable "
    "with them, NOT with sacreBLEU"
)


class AiaynPaperBleu(evaluate.Metric):
    __doc__ = _DESCRIPTION + "\n" + _KWARGS_DESCRIPTION

    def _info(self):
        return metric_info(
            _DESCRIPTION,
            _CITATION,
            _KWARGS_DESCRIPTION,
            "https://arxiv.org/abs/1706.03762",
            ("https://github.com/moses-smt/mosesdecoder", "https://github.com/hplt-project/sacremoses"),
            homepage="",
        )

    def _compute(self, predictions, references, lang, width=2, lowercase=False, compounds=True):
        tokenize = paper_bleu_tokenize if compounds else moses_tokenize
        hypotheses = [tokenize(line, lang) for line in predictions]
        streams = [[tokenize(line, lang) for line in stream] for stream in reference_streams(references)]
        # multi-bleu.perl: split on whitespace, no smoothing, closest reference length (-lc: lowercased).
        bleu = sacrebleu.BLEU(tokenize="none", smooth_method="none", lowercase=lowercase, force=True)
        result = bleu.corpus_score(hypotheses, streams)
        result.name = LOWERCASE_NAME if lowercase and not compounds else NAME
        signature = bleu.get_signature()
        signature.update("tok", f"moses-{lang}" + ("+atat" if compounds else ""))
        signature.update("sacremoses", sacremoses.__version__)
        signature = str(signature)
        return {
            **bleu_result(result, signature, width),
            "note": LOWERCASE_NOTE if lowercase and not compounds else NOTE,
        }
