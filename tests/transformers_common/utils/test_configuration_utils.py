"""`config_common_kwargs`, which `test_configuration_common.py` imports from a file the sdist does not ship.

Written for this project (not transformers' file): every argument of `PreTrainedConfig.__init__` of
transformers 5.24, each with a value other than its default, so that `check_config_arguments_init`
checks that a model's config passes every one of them on to `PreTrainedConfig`.
"""

config_common_kwargs = {
    "architectures": ["BertModel"],
    "output_hidden_states": True,
    "return_dict": False,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "is_encoder_decoder": True,
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
}
