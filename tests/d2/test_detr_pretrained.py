"""HuggingFaceDETR's ``pretrained`` folder is checked before transformers reads it: a missing folder, a folder
without weights and one whose weights hold NaN are refused naming the folder and what is wrong."""

from __future__ import annotations

import shutil

import pytest
import torch

from alrp_d2.modeling import HuggingFaceDETR
from alrp_d2.modeling.detr_pretrained import looks_like_hub_id

from .tiny_detr_detectors import RT_DETR_V2

pytest.importorskip("transformers", reason="HuggingFaceDETR needs transformers: pip install -e '.[detr]'")


def load(folder) -> HuggingFaceDETR:
    return HuggingFaceDETR(hf_config={"model_type": "rt_detr_v2"}, pretrained=str(folder), num_classes=3)


def test_a_missing_folder_without_weights_or_with_nan_weights_is_named(tmp_path):
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    HuggingFaceDETR(hf_config=RT_DETR_V2, num_classes=3).detr.save_pretrained(tmp_path / "saved")
    with pytest.raises(FileNotFoundError, match=f"pretrained='{tmp_path / 'missing'}'.*no such folder"):
        load(tmp_path / "missing")

    without = tmp_path / "without_weights"
    shutil.copytree(tmp_path / "saved", without)
    (without / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=f"pretrained='{without}'.*holds no weights .*model.safetensors"):
        load(without)

    nan = tmp_path / "nan_weights"
    shutil.copytree(tmp_path / "saved", nan)
    weights = load_file(nan / "model.safetensors")
    name = sorted(key for key, value in weights.items() if value.is_floating_point())[0]
    weights[name][0] = float("nan")
    save_file(weights, nan / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=f"pretrained='{nan}'.*model.safetensors holds NaN .* 1 tensor.*{name}"):
        load(nan)
    load(tmp_path / "saved")  # the folder as saved loads


def test_hub_ids_are_told_from_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "output").mkdir()
    assert looks_like_hub_id("PekingU/rtdetr_v2_r18vd") and looks_like_hub_id("rtdetr")
    for path in ("./model", "/abs/model", "a/b/c", "output/model", "~/model"):
        assert not looks_like_hub_id(path), path
