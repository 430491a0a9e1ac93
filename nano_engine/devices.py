"""devices.py: what a device gets by default, the dtype and the attention path, from what it can do.

A GPU's *compute capability* (``torch.cuda.get_device_capability``: 9.0 for an H100/H200, 8.0 for
an A100, 8.6 / 8.9 for an A10G, L4 or RTX 30/40, 7.5 for a T4 or RTX 20) says which number formats
its tensor cores multiply and which kernels Triton supports. The defaults follow from it:

===================  ======  ===========  ==========  ==============================================
GPU class            cc      dtype        attention   why
===================  ======  ===========  ==========  ==============================================
H100 / H200          9.0     bfloat16     triton      bf16 tensor cores; Triton's kernels compile to
                                                      ``wgmma`` / ``mma``
A100, A10G, L4,      8.x     bfloat16     triton      bf16 tensor cores (in fp32 the prefill tiles
RTX 30 / 40                                           shrink on 8.6 / 8.9, A10G, L4, RTX 30 / 40; an
                                                      A100 keeps 64x64: see ``fast/``)
T4, RTX 20           7.5     float32      torch       no bf16 tensor cores (bf16 is emulated, though
                                                      ``torch.cuda.is_bf16_supported()`` says True);
                                                      Triton supports cc >= 8.0 only and lowers every
                                                      ``tl.dot`` to FMA there
V100, older          < 7.5   float32      torch       as above
CPU                  -       float32      torch       exact, and what the chapters compare against
===================  ======  ===========  ==========  ==============================================

Why float32 and not float16 on a T4 (whose tensor cores do multiply fp16): the Qwen family is
known to overflow float16 activations (Qwen2-7B and Qwen2-1.5B in float16 gave NaN logits and
answers of only "!": GitHub QwenLM/Qwen3 issues #761 and #826, 2024), and that is unverified for
Qwen3-0.6B here; a reader who wants
the speed passes ``dtype=torch.float16`` and checks the outputs (``benchmarks/gpu_check.py`` does,
where the real checkpoint is present). Float32 also keeps every exact-equality check of the
chapters true on the GPU. An explicit ``dtype=`` or ``attention=`` always wins over these defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DeviceDefaults:
    """The default ``dtype`` and attention path (``"torch"`` or ``"triton"``) of a device, and why."""

    dtype: torch.dtype
    attention: str
    why: str


TENSOR_CORE_BF16 = (8, 0)
"""The first compute capability with bfloat16 tensor cores, and the oldest Triton supports."""


def capability_defaults(capability: tuple[int, int]) -> DeviceDefaults:
    """The defaults of a CUDA device of compute ``capability`` (major, minor)."""
    if tuple(capability) >= TENSOR_CORE_BF16:
        return DeviceDefaults(torch.bfloat16, "triton", f"sm_{capability[0]}{capability[1]}: bf16 tensor cores, "
                              "Triton supported")
    return DeviceDefaults(torch.float32, "torch", f"sm_{capability[0]}{capability[1]}: no bf16 tensor cores and no "
                          "Triton support below sm_80; float32 (fp16 is opt-in: dtype=torch.float16)")


def device_defaults(device: torch.device | str) -> DeviceDefaults:
    """The defaults of ``device`` (a CUDA device is asked for its compute capability)."""
    device = torch.device(device)
    if device.type != "cuda":
        return DeviceDefaults(torch.float32, "torch", f"{device.type}: float32, the reference attention")
    return capability_defaults(torch.cuda.get_device_capability(device))


GPU_CLASSES = {"H100 / H200": (9, 0), "A100": (8, 0), "A10G / RTX 30": (8, 6), "L4 / RTX 40": (8, 9),
               "T4 / RTX 20": (7, 5), "V100": (7, 0)}
"""A compute capability per GPU class, for the table ``python -m nano_engine.devices`` prints."""


if __name__ == "__main__":
    for name, cc in GPU_CLASSES.items():
        d = capability_defaults(cc)
        print(f"{name:14s} sm_{cc[0]}{cc[1]}  {str(d.dtype).removeprefix('torch.'):9s} {d.attention}")
    here = "cuda" if torch.cuda.is_available() else "cpu"
    d = device_defaults(here)
    print(f"this machine ({here}): {str(d.dtype).removeprefix('torch.')}, {d.attention} ({d.why})")
