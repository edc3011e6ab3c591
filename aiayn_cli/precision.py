"""The precision a run computes in, chosen by the hardware: `mixed_precision: auto`, `--precision auto`.

bf16 halves the memory traffic and, where the device has bf16 matrix units, runs matrix products
two to three times faster than fp32. Where it has none the products are emulated, many times
slower than fp32. So `auto` takes bf16 only where the device computes it natively:

- CUDA: `torch.cuda.is_bf16_supported(including_emulation=False)` (Ampere and later);
- a CPU: the instructions (AVX512-BF16 or AMX on x86; oneDNN's own check on ARM) and oneDNN
  allowed to use them (`ONEDNN_MAX_CPU_ISA` can forbid them);
- elsewhere (MPS, older GPUs and CPUs): fp32. Never fp16 by default: on a CPU it is emulated, and
  on a GPU it needs loss scaling that a user should ask for.

An explicit `bf16` where it is emulated still runs, with a warning that says how much slower a
matrix product is here in bf16 than in fp32 (measured on the spot, in a fraction of a second).
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import AiaynError

if TYPE_CHECKING:  # torch is imported where it is used: a decoding engine without torch reads this module too
    import torch

# oneDNN's ISA names in increasing order (ONEDNN_MAX_CPU_ISA); bf16 products are native from AVX512_CORE_BF16 on.
ONEDNN_ISAS = (
    "SSE41",
    "AVX",
    "AVX2",
    "AVX2_VNNI",
    "AVX2_VNNI_2",
    "AVX512_CORE",
    "AVX512_CORE_VNNI",
    "AVX512_CORE_BF16",
    "AVX10_1_512",
    "AVX512_CORE_FP16",
    "AVX10_1_512_AMX",
    "AVX512_CORE_AMX",
    "AVX10_1_512_AMX_FP16",
    "AVX512_CORE_AMX_FP16",
    "AVX10_2_512",
    "AVX10_2_512_AMX_2",
)
PRECISIONS = ("auto", "no", "fp16", "bf16")  # accelerate's names, and auto


@dataclass(frozen=True)
class PrecisionChoice:
    """What a run computes in, and why."""

    precision: str  # accelerate's name: "no" (fp32), "bf16" or "fp16"
    reason: str
    warning: str | None = None  # set when the precision asked for is emulated here

    def describe(self) -> str:
        return f"precision: {'fp32' if self.precision == 'no' else self.precision} ({self.reason})"


def native_bf16(device: str | torch.device = "cpu") -> tuple[bool, str]:
    """Whether `device` computes bf16 matrix products natively; (answer, the reason in a few words)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        native = torch.cuda.is_bf16_supported(including_emulation=False)
        name = torch.cuda.get_device_name(device)
        return native, f"{name} {'has' if native else 'has no'} native bf16"
    if device.type != "cpu":
        return False, f"bf16 is not chosen automatically on {device.type}"
    return native_bf16_cpu()


def cpu_features() -> dict[str, object]:
    """What this CPU and this torch build say about bf16 (the inputs of `native_bf16_cpu`)."""
    import torch

    return {
        "capability": torch.backends.cpu.get_cpu_capability(),  # ATen's kernels: AVX2, AVX512, ...
        "onednn_bf16": torch.ops.mkldnn._is_mkldnn_bf16_supported(),
        "avx512_bf16": torch.cpu._is_avx512_bf16_supported(),
        "amx": torch.cpu._is_amx_tile_supported(),
        "x86": platform.machine().lower() in ("x86_64", "amd64", "i386", "i686"),
        "onednn_max_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper(),
    }


def native_bf16_cpu(features: dict[str, object] | None = None) -> tuple[bool, str]:
    """Whether the CPU computes bf16 matrix products natively, from `cpu_features()`; (answer, reason)."""
    f = features if features is not None else cpu_features()
    capability, limit = f["capability"], f["onednn_max_isa"]
    if not f["onednn_bf16"]:
        return False, f"CPU {capability}: oneDNN has no bf16 here"
    if limit in ONEDNN_ISAS and ONEDNN_ISAS.index(limit) < ONEDNN_ISAS.index("AVX512_CORE_BF16"):
        return False, f"CPU {capability}: ONEDNN_MAX_CPU_ISA={limit} rules out the bf16 instructions"
    if not f["x86"]:
        return True, f"CPU {capability}: oneDNN computes bf16"  # ARM with the BF16 extension
    if onednn_amx(f):
        return True, f"CPU {capability} with AMX: native bf16"
    if f["avx512_bf16"] or f["amx"]:  # an AMX CPU has AVX512-BF16 too; ONEDNN_MAX_CPU_ISA left it that
        return True, f"CPU {capability} with AVX512-BF16: native bf16"
    return False, f"CPU {capability} without AVX512-BF16 or AMX: bf16 would be emulated"


def onednn_amx(features: dict[str, object] | None = None) -> bool:
    """Whether oneDNN's kernels use AMX's tiles here: the CPU has them and `ONEDNN_MAX_CPU_ISA` allows them."""
    f = features if features is not None else cpu_features()
    limit = f["onednn_max_isa"]
    return bool(f["amx"]) and (
        limit not in ONEDNN_ISAS or ONEDNN_ISAS.index(limit) >= ONEDNN_ISAS.index("AVX10_1_512_AMX")
    )


def choose_precision(requested: str | None, device: str | torch.device = "cpu") -> PrecisionChoice:
    """The precision for `requested` (auto, no, fp16, bf16) on `device`.

    `auto`: bf16 where `device` computes it natively, else fp32. An explicit bf16 or fp16 is kept;
    where the device emulates it, the choice carries a warning with the slowdown measured here.
    """
    import torch

    device = torch.device(device)
    if requested in (None, "auto"):
        native, why = native_bf16(device)
        return PrecisionChoice("bf16" if native else "no", f"auto: {why}")
    if requested == "bf16":
        native, why = native_bf16(device)
        if not native and device.type == "cpu":
            slower = emulation_slowdown(torch.bfloat16)
            return PrecisionChoice("bf16", "asked for", _emulated_warning("bf16", why, slower))
        return PrecisionChoice("bf16", "asked for")
    if requested == "fp16" and device.type == "cpu":
        slower = emulation_slowdown(torch.float16)
        return PrecisionChoice("fp16", "asked for", _emulated_warning("fp16", "a CPU has no fp16 training", slower))
    return PrecisionChoice(requested, "asked for")


def _emulated_warning(name: str, why: str, slower: float) -> str:
    return (
        f"warning: {name} is emulated here ({why}): a matrix product in {name} takes {slower:.1f}x as long "
        f"as in fp32 on this CPU, measured just now; mixed_precision: auto (--precision auto) "
        f"chooses fp32 here"
    )


def emulation_slowdown(dtype: torch.dtype, repeats: int = 5) -> float:
    """How many times longer a linear map of a training step's size (512 x 256 -> 1024) takes in
    `dtype` than in fp32 here, on one thread (the best of `repeats`, so that other load counts less)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x, w = torch.randn(512, 256), torch.randn(1024, 256)
        times = {}
        for kind in (torch.float32, dtype):
            xk, wk = x.to(kind), w.to(kind)
            torch.nn.functional.linear(xk, wk)  # warm up
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                torch.nn.functional.linear(xk, wk)
                best = min(best, time.perf_counter() - start)
            times[kind] = best
    finally:
        torch.set_num_threads(threads)
    return times[dtype] / max(times[torch.float32], 1e-9)


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("model name", "Model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_summary() -> str:
    """One line for a benchmark's header: the CPU, ATen's kernels, whether bf16 is native, the threads."""
    import torch

    native, why = native_bf16_cpu()
    return (
        f"CPU: {cpu_model()}, {os.cpu_count()} cores; get_cpu_capability() {torch.backends.cpu.get_cpu_capability()}; "
        f"bf16 native: {'yes' if native else 'no'} ({why}); torch {torch.__version__}, {torch.get_num_threads()} threads"
    )


# ---------------------------------------------------------------------------------------------
# Inference: one value, decided once, read by every engine
# ---------------------------------------------------------------------------------------------

COMPUTE_DTYPES = ("fp32", "bf16", "fp16")
INFERENCE_PRECISIONS = ("auto", *COMPUTE_DTYPES)  # --precision of translate, evaluate, serve, ...
QUANTIZATIONS = ("none", "int8")  # --quantization
INT8 = "int8"  # the API's `dtype="int8"`: --quantization int8
# One default for every command and API (translate, evaluate, serve, attention, layers, heads,
# `Translator`): the same model and sentence give the same tokens in each, and on every CPU; bf16 is a
# choice (`auto`, `bf16`), because it moves tokens (docs/precision.md).
DEFAULT_INFERENCE_PRECISION = "fp32"


@dataclass(frozen=True)
class InferencePrecision:
    """What a translation computes in: `compute` (fp32, bf16 or fp16: the activations and the float
    weights; auto in a request that no device has resolved yet) and `int8_weights` (the linear maps
    hold int8 weights, with fp32 around them). Made by `inference_precision`; every engine reads it."""

    compute: str = DEFAULT_INFERENCE_PRECISION
    int8_weights: bool = False

    @property
    def name(self) -> str:
        """int8, or the compute dtype: what a translator reports (`Translator.precision`)."""
        return INT8 if self.int8_weights else self.compute

    @property
    def torch_dtype(self) -> torch.dtype:
        """The dtype of the model's float weights and activations in PyTorch."""
        import torch

        return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[self.compute]

    @property
    def compute_type(self) -> str:
        """CTranslate2's name for it (`ctranslate2.Translator(..., compute_type=)`)."""
        return "int8" if self.int8_weights else {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[self.compute]


def inference_precision(
    precision: str | torch.dtype | InferencePrecision | None = None,
    quantization: str = "none",
    device: str | torch.device | None = None,
    computes: tuple[str, ...] | None = None,
) -> InferencePrecision:
    """The precision of a translation, from `--precision` and `--quantization` or the API's `dtype=`;
    an `AiaynError` keyed by the option at fault.

    Args:
        precision: auto, fp32, bf16, fp16, int8 (the API's spelling of `quantization="int8"`), a
            `torch.dtype`, or an `InferencePrecision` (kept, auto resolved); None:
            `DEFAULT_INFERENCE_PRECISION`.
        quantization: none or int8 (int8 weights computing in fp32: with precision auto or fp32).
        device: where it runs: auto becomes bf16 where `device` computes it natively (`native_bf16`)
            and the engine has it (`computes`: its compute dtypes there; default all), else fp32.
            None: checked only, auto kept (a request, resolved by the engine on its device).
    """
    if isinstance(precision, InferencePrecision):
        chosen = precision
    else:
        if precision is None:
            precision = DEFAULT_INFERENCE_PRECISION
        elif not isinstance(precision, str):  # a torch.dtype
            precision = TORCH_NAMES.get(str(precision).removeprefix("torch."), str(precision))
        if precision == INT8:
            precision, quantization = "fp32", INT8
        if precision not in INFERENCE_PRECISIONS:
            raise AiaynError(f"{precision}: choose one of {', '.join(INFERENCE_PRECISIONS)}, {INT8}", key="dtype")
        if quantization not in QUANTIZATIONS:
            raise AiaynError(f"{quantization}: choose one of {', '.join(QUANTIZATIONS)}", key="quantization")
        int8 = quantization == INT8
        if int8 and precision not in ("auto", "fp32"):
            raise AiaynError(
                f"int8 computes in fp32 with int8 weights; give {{dtype}} auto or fp32, not {precision}",
                key="quantization",
                mentions=("dtype",),
            )
        chosen = InferencePrecision("fp32" if int8 else precision, int8)
    if chosen.compute == "auto" and device is not None:
        native = (computes is None or "bf16" in computes) and native_bf16(device)[0]
        chosen = InferencePrecision("bf16" if native else "fp32", chosen.int8_weights)
    return chosen


TORCH_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


__all__ = [
    "COMPUTE_DTYPES",
    "DEFAULT_INFERENCE_PRECISION",
    "INFERENCE_PRECISIONS",
    "InferencePrecision",
    "PRECISIONS",
    "QUANTIZATIONS",
    "PrecisionChoice",
    "choose_precision",
    "cpu_features",
    "cpu_model",
    "emulation_slowdown",
    "inference_precision",
    "machine_summary",
    "native_bf16",
    "native_bf16_cpu",
]
