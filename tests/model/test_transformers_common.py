"""transformers' own common model tests (5.25.0's `ModelTesterMixin`, `ConfigTester`) run against the model.

A tiny config and a tester in the shape of transformers' model tests (BART's, Marian's); the mixins are
the release's files, kept in `transformers_common/` (`fetch.py` fetches and verifies them). Every test
that does not run here is listed, with its reason, in docs/transformers-tests.md.
"""

from __future__ import annotations

import unittest
from unittest import mock

import torch
from transformers.models.auto import modeling_auto
from transformers_common.fetch import check
from transformers_common.generation.test_utils import GenerationTesterMixin
from transformers_common.test_configuration_common import ConfigTester
from transformers_common.test_modeling_common import ModelTesterMixin, ids_tensor

from aiayn_cli.model import AiaynConfig, AiaynForConditionalGeneration, AiaynModel


class AiaynModelTester:
    """A tiny aiayn model and a batch for it: 2 layers, d_model 16, 4 heads, 99 tokens, some padding."""

    def __init__(self, parent, batch_size=13, seq_length=7, is_training=True, vocab_size=99, hidden_size=16):
        self.parent = parent
        self.batch_size, self.seq_length = batch_size, seq_length
        self.encoder_seq_length = self.decoder_seq_length = seq_length
        self.is_training = is_training
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.num_hidden_layers, self.num_attention_heads = 2, 4
        self.pad_token_id, self.bos_token_id, self.eos_token_id = 0, 1, 2

    def get_config(self) -> AiaynConfig:
        return AiaynConfig(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            d_ff=4 * self.hidden_size,
            num_heads=self.num_attention_heads,
            num_encoder_layers=self.num_hidden_layers,
            num_decoder_layers=self.num_hidden_layers,
            dropout=0.1,
            max_position_embeddings=64,
            pad_token_id=self.pad_token_id,
            bos_token_id=self.bos_token_id,
            eos_token_id=self.eos_token_id,
            decoder_start_token_id=self.bos_token_id,
        )

    def prepare_config_and_inputs(self):
        # ids from 3 up (no special token inside a sentence), each sentence ending with </s>
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size - 3) + 3
        input_ids[:, -1] = self.eos_token_id
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size - 3) + 3
        decoder_input_ids[:, 0] = self.bos_token_id
        attention_mask = torch.ones_like(input_ids)
        attention_mask[0, :2] = 0  # one padded source sentence, padded on the left as generate() pads
        input_ids[0, :2] = self.pad_token_id
        inputs = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": torch.ones_like(decoder_input_ids),
        }
        return self.get_config(), inputs

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()


class AiaynModelTest(ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    all_model_classes = (AiaynModel, AiaynForConditionalGeneration)
    is_encoder_decoder = True
    # transformers runs this test for models added from 2023 on, and for older ones once their `_init_weights`
    # initialises every weight (the date is read from a copyright line, which the config file has not)
    test_can_init_all_missing_weights_before_2023 = True

    @classmethod
    def setUpClass(cls):
        # transformers lists its own models in the auto mappings, which the tests read to tell a base model
        # (no loss) from one with a head: aiayn is listed there for the time of these tests
        for mapping, name in (
            (modeling_auto.MODEL_MAPPING_NAMES, "AiaynModel"),
            (modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, "AiaynForConditionalGeneration"),
        ):
            patch = mock.patch.dict(mapping, {"aiayn": name})
            patch.start()
            cls.addClassCleanup(patch.stop)

    def setUp(self):
        self.model_tester = AiaynModelTester(self)
        self.config_tester = ConfigTester(self, config_class=AiaynConfig, d_model=16, num_heads=4)

    def test_config(self):
        self.config_tester.run_common_tests()


def test_vendored_files_match_their_pins():
    """The release's files in `transformers_common/` are the ones `fetch.py` pins (version and sha256)."""
    assert check() == []
