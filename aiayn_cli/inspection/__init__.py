"""Looking inside a trained model: the attention of §3.2.3 and what it says.

This package owns attention extraction and everything drawn from it, the library behind
`aiayn attention` and `aiayn translate --alignment`:

* `extract`: `explain(model, tokenizer, sources, references=None)` runs the model itself with
  `output_attentions=True` on the model's own translation (the same tokens `aiayn translate`
  prints) or on a reference (teacher forcing) and returns, per sentence, the tokens, each target
  token's log-probability and every attention tensor (Hugging Face's tuple-of-layers shapes), plus
  the raw scores q.k of eq. (1) from the model's own projections, for the explorer's walk-through;
* `views`: the tensors narrowed (layer, head, mean of heads) and merged into words (`--words`,
  `--hide-eos`), as the pictures and tables show them;
* `alignment`: word alignments from encoder-decoder attention (`i-j` pairs, as fairseq's
  `--print-alignment` and Moses), and the alignment error rate (AER, Och & Ney 2003);
* `formats`: the text table (OpenNMT's `-attn_debug`), JSON (for notebooks and bertviz) and the
  heatmap grids (PNG), `bertviz_inputs` (bertviz's head_view / model_view in a notebook); `explorer`:
  the offline HTML explorer, one self-contained file, also drawn by `aiayn serve`'s page;
* `heads`: which heads matter (`aiayn heads`: statistics, masked loss and BLEU, pruning), through the
  model's own head masks; `layers`: each decoder layer's prediction and alignment (`aiayn layers`);
  `history`: attention and alignment over a run's checkpoints (`aiayn attention --checkpoints RUN`).
"""

from .extract import Explanation, explain
from .formats import bertviz_inputs

__all__ = ["Explanation", "bertviz_inputs", "explain"]
