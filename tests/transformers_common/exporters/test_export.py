"""`ExportTesterMixin`, which `test_modeling_common.py` imports from a file the release's sdist does not ship.

Written for this project, not transformers' file: `torch.export` of `forward` and of `generate()`
(decomposed by transformers' own `export_for_generation` into the encoder, one decoding step and the
pre-softmax projection), with static and dynamic shapes, through transformers' `DynamoExporter`; each
exported graph must give the eager model's numbers on the same inputs (fp32, to 1e-5).
"""

from __future__ import annotations

import copy

import pytest
import torch
from parameterized import parameterized
from transformers import GenerationConfig


def _first_tensor(output):
    if torch.is_tensor(output):
        return output
    values = output.values() if hasattr(output, "values") else output
    return next(value for value in values if torch.is_tensor(value))


class ExportTesterMixin:
    def _export_model(self, model_class):
        from transformers.exporters.exporter_dynamo import DynamoConfig, DynamoExporter

        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        torch.manual_seed(0)
        return model_class(config).eval(), inputs, DynamoExporter(), DynamoConfig

    def _check_forward_export(self, dynamic: bool):
        for model_class in self.all_model_classes:
            model, inputs, exporter, DynamoConfig = self._export_model(model_class)
            exported = exporter.export(model, inputs, DynamoConfig(dynamic=dynamic))
            with torch.no_grad():
                expected = _first_tensor(model(**inputs))
            torch.testing.assert_close(_first_tensor(exported(**inputs)), expected, atol=1e-5, rtol=1e-5)

    def test_torch_export_forward(self):
        self._check_forward_export(dynamic=False)

    @pytest.mark.slow
    def test_torch_export_forward_dynamic_shapes(self):
        self._check_forward_export(dynamic=True)

    @parameterized.expand(
        [
            (f"{shapes}_shapes_{cache}_cache", shapes == "dynamic", cache)
            for shapes in ("static", "dynamic")
            for cache in ("dynamic", "static")
        ]
    )
    @pytest.mark.slow
    def test_torch_export_generate(self, _, dynamic, cache):
        from transformers.exporters.utils import decompose_for_generation

        for model_class in self.all_generative_model_classes:
            model, inputs, exporter, DynamoConfig = self._export_model(model_class)
            settings = {**model.generation_config.to_dict(), "num_beams": 1, "max_new_tokens": 4}
            generation_config = GenerationConfig(**{**settings, "cache_implementation": cache})
            prompt = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
            components = decompose_for_generation(model, prompt, generation_config=generation_config)
            exported = exporter.export_for_generation(
                model, prompt, DynamoConfig(dynamic=dynamic), generation_config=generation_config
            )
            self.assertEqual(sorted(exported.runners), sorted(components))
            for name, (submodel, sample) in components.items():
                with torch.no_grad():
                    expected = _first_tensor(submodel(**copy.deepcopy(sample)))
                # the flags (use_cache, return_dict, output_*) are fixed at export: the graph takes the tensors
                graph_inputs = {k: v for k, v in sample.items() if v is not None and not isinstance(v, bool)}
                got = _first_tensor(exported.runners[name](**copy.deepcopy(graph_inputs)))
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5, msg=f"{name}: {{}}".format)
