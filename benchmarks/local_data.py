"""Where the benchmarks find a local copy of Multi30k: one variable, as the tests do.

`AIAYN_MULTI30K` names a folder of train.en, train.de, val.en, val.de, test2016.en, test2016.de
(default: `../shared/data/multi30k` beside the repository, the copy this repository's CI has).
Recipes never name it: they read the Hub dataset `bentrevett/multi30k`.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MULTI30K = Path(os.environ.get("AIAYN_MULTI30K", REPO.parent / "shared" / "data" / "multi30k"))
