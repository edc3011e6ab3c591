"""`GenerationTesterMixin`, which `test_modeling_common.py` imports from a file the release's sdist does not ship.

Written for this project, not transformers' file (whose tests are not run here; docs/transformers-tests.md):
`generate()` gives the same tokens with the cache it makes by default, with a fixed-size one
(`cache_implementation="static"`) and without a cache, in greedy search, beam search and sampling.
"""

from __future__ import annotations

import torch
from parameterized import parameterized

SEARCHES = {
    "greedy": {"num_beams": 1, "do_sample": False},
    "beam_search": {"num_beams": 3, "do_sample": False},
    "sample": {"num_beams": 1, "do_sample": True, "top_k": 5},
}


class GenerationTesterMixin:
    def _generate(self, model, inputs, search: str, **kwargs) -> torch.Tensor:
        torch.manual_seed(0)  # the same draws for every cache, in sampling
        prompt = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
        return model.generate(**prompt, **SEARCHES[search], max_new_tokens=5, min_new_tokens=5, **kwargs)

    @parameterized.expand([(search,) for search in SEARCHES])
    def test_generate_same_tokens_with_every_cache(self, search):
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_generative_model_classes:
            torch.manual_seed(0)
            model = model_class(config).eval()
            expected = self._generate(model, inputs, search)
            self.assertEqual(expected.shape, (self.model_tester.batch_size, 6))
            for kwargs in ({"cache_implementation": "static"}, {"use_cache": False}):
                self.assertTrue(torch.equal(self._generate(model, inputs, search, **kwargs), expected), kwargs)
