"""alrp_d2.model_zoo: the project's configs by their path under configs/, from any working directory."""

from __future__ import annotations

import pytest

from alrp_d2 import model_zoo


def test_yaml_and_lazy_configs_load_by_their_path_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = model_zoo.get_config("quickstart/alrp_retinanet_shapes.yaml")
    assert cfg.MODEL.RETINANET.NUM_CLASSES == 5 and cfg.MODEL.ALRP.CRITERION == "AlrpCriterion"
    lazy = model_zoo.get_config("quickstart/alrp_retinanet_shapes.py")
    assert lazy.train.max_iter == 1200 and lazy.model.num_classes == 5


def test_the_package_data_comes_before_the_checkout(tmp_path, monkeypatch):
    (tmp_path / "quickstart").mkdir()
    (tmp_path / "quickstart" / "alrp_retinanet_shapes.yaml").write_text("SEED: 7\n")
    roots = [tmp_path, *model_zoo.config_roots()]  # an installed package's configs, then the checkout's
    monkeypatch.setattr(model_zoo, "config_roots", lambda: roots)
    assert model_zoo.get_config("quickstart/alrp_retinanet_shapes.yaml").SEED == 7


def test_an_unknown_config_names_where_it_was_looked_for():
    with pytest.raises(FileNotFoundError, match="'quickstart/nope.yaml' not found in .*configs"):
        model_zoo.get_config("quickstart/nope.yaml")
