"""The `torch` engine: aiayn's own decoder (`search.decode`, the paper's search and every option) on
the model in PyTorch, on one device, in one dtype.

    engine = TorchEngine(model, device="cpu", dtype="fp32")
    engine.decode([[12, 7, 2]], DecodingOptions())  # [[Hypothesis(tokens=[...], score=..., log_prob=...)]]
"""

from __future__ import annotations

import torch

from ..errors import AiaynError
from ..model.modeling_aiayn import AiaynForConditionalGeneration
from ..precision import inference_dtype
from .defaults import DecodingOptions
from .incremental import PreparedModel
from .search import Hypothesis, decode

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int8": torch.float32}
INT8 = "int8"  # CPUs: int8 weights for the linear maps, float32 for the rest and the activations
DEVICES = ("auto", "cpu", "cuda", "mps")


def pick_device(device: str | None = None) -> torch.device:
    """`device`, or the best one here: cuda, then mps, then cpu."""
    if device not in (None, "auto"):
        try:
            chosen = torch.device(device)
        except RuntimeError as err:
            raise AiaynError(f"{device}: not a device ({err})", key="device") from None
        if chosen.type == "cuda" and not torch.cuda.is_available():
            raise AiaynError(f"{device}: CUDA is not available here", key="device")
        if chosen.type == "mps" and not torch.backends.mps.is_available():
            raise AiaynError(f"{device}: MPS is not available here", key="device")
        return chosen
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def pick_dtype(dtype: str | torch.dtype | None, device: str | torch.device = "cpu") -> torch.dtype:
    """`dtype`; None: fp32; "auto": bf16 where `device` computes it natively, else fp32 (`aiayn_cli.precision`)."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return inference_dtype(device)
    if dtype not in DTYPES:
        raise AiaynError(f"{dtype}: choose one of auto, {', '.join(DTYPES)}", key="dtype")
    return DTYPES[dtype]


class TorchEngine:
    """aiayn's decoder on `model`, moved to `device` (auto: the best here) in `dtype` (None: fp32; auto,
    fp32, bf16, fp16, or int8: int8 weights for the linear maps on a CPU), with the fast path's
    projections prepared once from the weights (a change to the weights needs a new engine).

    `head_masks` (the model's forward arguments `head_mask`, `decoder_head_mask`, `cross_attn_head_mask`,
    `(N, h)` each; None by default) remove heads from every decoded batch.
    """

    name = "torch"

    def __init__(
        self,
        model: AiaynForConditionalGeneration,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
    ):
        self.device = device if isinstance(device, torch.device) else pick_device(device)
        if dtype == INT8 and self.device.type != "cpu":
            raise AiaynError(
                f"int8: int8 decoding runs on CPUs only, not on {self.device.type} (use {{device}} cpu)",
                key="quantization",
                mentions=("device",),
            )
        self.model = model.to(device=self.device, dtype=pick_dtype(dtype, self.device)).eval()
        self.precision = INT8 if dtype == INT8 else str(self.model.dtype).removeprefix("torch.")
        self.head_masks: dict[str, torch.Tensor] | None = None
        try:
            self.prepared = PreparedModel(self.model, "int8" if dtype == INT8 else "float")
        except RuntimeError as err:
            if dtype != INT8:
                raise
            raise AiaynError(f"int8: {err}", key="quantization") from None

    @torch.inference_mode()
    def decode(self, sources: list[list[int]], options: DecodingOptions) -> list[list[Hypothesis]]:
        """Each source's hypotheses, best first: `sources` are token ids ending with `</s>`."""
        width = max(len(s) for s in sources)
        input_ids = torch.full((len(sources), width), self.model.config.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(sources), width), dtype=torch.long)
        for row, tokens in enumerate(sources):
            input_ids[row, : len(tokens)] = torch.tensor(tokens)
            attention_mask[row, : len(tokens)] = 1
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        return decode(self.model, input_ids, attention_mask, options, self.prepared, self.head_masks)


__all__ = ["DEVICES", "DTYPES", "INT8", "TorchEngine", "pick_device", "pick_dtype"]
