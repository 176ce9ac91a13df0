"""HuggingFaceDETR's ``pretrained`` folder is checked before transformers reads it: a missing folder, a folder
without weights, one whose weights hold NaN, a truncated ``model.safetensors``, a folder of a model type the detector
does not take (DETR v1) and pickled weights (refused unread) are refused naming the folder and what is wrong."""

from __future__ import annotations

import os
import pickle
import shutil

import pytest
import torch

from alrp_d2.checks.errors import ArgumentError
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
    with pytest.raises(ArgumentError, match=f"pretrained='{tmp_path / 'missing'}'.*no such folder"):
        load(tmp_path / "missing")

    without = tmp_path / "without_weights"
    shutil.copytree(tmp_path / "saved", without)
    (without / "model.safetensors").unlink()
    with pytest.raises(ArgumentError, match=f"pretrained='{without}'.*holds no weights .*model.safetensors"):
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


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    HuggingFaceDETR(hf_config=RT_DETR_V2, num_classes=3).detr.save_pretrained(tmp_path / "saved")
    return tmp_path / "saved"


def test_a_truncated_safetensors_file_is_named(saved, tmp_path):
    truncated = tmp_path / "truncated"
    shutil.copytree(saved, truncated)
    weights = truncated / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    message = f"pretrained='{truncated}'.*model.safetensors cannot be read, truncated or damaged"
    with pytest.raises(ArgumentError, match=message):
        load(truncated)


def test_a_folder_of_another_model_type_is_named_before_transformers_reads_it(tmp_path):
    from transformers import DetrConfig

    DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False).save_pretrained(tmp_path / "detr")
    message = f"pretrained='{tmp_path / 'detr'}'.*config.json is of model_type 'detr'; supported: rt_detr, "
    with pytest.raises(ArgumentError, match=message):
        load(tmp_path / "detr")


class _Marker:
    """A pickle that, unpickled, writes a file: the proof that the file was not unpickled is that none exists."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_pickled_weights_are_refused_unread(saved, tmp_path):
    pickled = tmp_path / "pickled"
    shutil.copytree(saved, pickled)
    (pickled / "model.safetensors").unlink()
    marker = tmp_path / "unpickled"
    (pickled / "pytorch_model.bin").write_bytes(pickle.dumps({"weight": _Marker(str(marker))}))
    message = f"pretrained='{pickled}'.*holds pytorch_model.bin, pickled weights, which are not loaded"
    with pytest.raises(ArgumentError, match=message):
        load(pickled)
    assert not marker.exists()


def test_hub_ids_are_told_from_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "output").mkdir()
    assert looks_like_hub_id("PekingU/rtdetr_v2_r18vd") and looks_like_hub_id("rtdetr")
    for path in ("./model", "/abs/model", "a/b/c", "output/model", "~/model"):
        assert not looks_like_hub_id(path), path
