"""detectron2's deformable convolutions (DCN, DCNv2) with a path for devices other than CUDA.

detectron2's ``DeformConv`` and ``ModulatedDeformConv`` have CUDA kernels only. Their subclasses here run the
same layer through ``torchvision.ops.deform_conv2d`` on other devices (the CPU): the same weight, bias and
offsets, (dy, dx) for each kernel tap in row-major order, per deformable group, and DCNv2's mask after its
sigmoid. On CUDA they are detectron2's layers unchanged.
"""

from __future__ import annotations

from typing import Dict, Tuple, Type, Union

from detectron2.layers import DeformConv, ModulatedDeformConv
from torch import Tensor, nn
from torchvision.ops import deform_conv2d

__all__ = ["DeformConvWithCpu", "ModulatedDeformConvWithCpu", "with_cpu_deform_conv"]


def _norm_and_activation(layer: Union[DeformConv, ModulatedDeformConv], x: Tensor) -> Tensor:
    if layer.norm is not None:
        x = layer.norm(x)
    if layer.activation is not None:
        x = layer.activation(x)
    return x


class DeformConvWithCpu(DeformConv):
    """detectron2's ``DeformConv``; off CUDA, ``torchvision.ops.deform_conv2d``."""

    def forward(self, x: Tensor, offset: Tensor) -> Tensor:
        if x.is_cuda or x.numel() == 0:
            return super().forward(x, offset)
        x = deform_conv2d(x, offset, self.weight, None, self.stride, self.padding, self.dilation)
        return _norm_and_activation(self, x)


class ModulatedDeformConvWithCpu(ModulatedDeformConv):
    """detectron2's ``ModulatedDeformConv`` (DCNv2); off CUDA, ``torchvision.ops.deform_conv2d`` with the mask."""

    def forward(self, x: Tensor, offset: Tensor, mask: Tensor) -> Tensor:
        if x.is_cuda or x.numel() == 0:
            return super().forward(x, offset, mask)
        x = deform_conv2d(x, offset, self.weight, self.bias, self.stride, self.padding, self.dilation, mask=mask)
        return _norm_and_activation(self, x)


_WITH_CPU: Dict[Type[nn.Module], Type] = {
    DeformConv: DeformConvWithCpu,
    ModulatedDeformConv: ModulatedDeformConvWithCpu,
}
_ARGUMENTS: Tuple[str, ...] = ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation")
_ARGUMENTS += ("groups", "deformable_groups", "norm", "activation")


def _with_cpu_path(layer: Union[DeformConv, ModulatedDeformConv]) -> nn.Module:
    """The subclass of ``layer``'s class with the same arguments, parameters (the same tensors) and modules."""
    arguments = {name: getattr(layer, name) for name in _ARGUMENTS}
    if isinstance(layer, ModulatedDeformConv):
        arguments["bias"] = layer.with_bias
    new = _WITH_CPU[type(layer)](**arguments)
    new.weight, new.bias = layer.weight, layer.bias
    return new


def with_cpu_deform_conv(module: nn.Module) -> nn.Module:
    """Replaces every detectron2 ``DeformConv`` / ``ModulatedDeformConv`` inside ``module`` by its subclass above,
    which keeps its parameters; returns ``module``."""
    for name, child in module.named_children():
        if type(child) in _WITH_CPU:
            module.add_module(name, _with_cpu_path(child))
        else:
            with_cpu_deform_conv(child)
    return module
