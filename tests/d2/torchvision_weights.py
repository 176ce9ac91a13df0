"""A torchvision ResNet's weights as detectron2's torchvision converter writes them, for the tests that load converted
torchvision weights."""

from __future__ import annotations

import functools

TORCHVISION_TO_D2_RENAMES = (
    *((f"layer{stage}", f"res{stage + 1}") for stage in range(1, 5)),
    *((f"bn{conv}", f"conv{conv}.norm") for conv in range(1, 4)),
    ("downsample.0", "shortcut"),
    ("downsample.1", "shortcut.norm"),
)


def torchvision_to_detectron2(state_dict: dict) -> dict:
    """A torchvision ResNet state dict as the converter writes it (stem keys under ``stem.``)."""

    def renamed(key: str) -> str:
        return functools.reduce(lambda name, rule: name.replace(*rule), TORCHVISION_TO_D2_RENAMES, key)

    model = {
        renamed(key if key.startswith("layer") else f"stem.{key}"): value.detach().numpy()
        for key, value in state_dict.items()
    }
    return {"model": model, "__author__": "torchvision", "matching_heuristics": True}
