"""alrp-d2: aLRP Loss (Oksuz et al., NeurIPS 2020) for detectron2.

``alrp_d2.losses`` is pure torch. When detectron2 is installed, importing ``alrp_d2`` also
registers the meta-architectures, heads and datasets of the project in detectron2's
registries and exposes :func:`add_alrp_config`.
"""

import importlib.util

__version__ = "0.1.0"

if importlib.util.find_spec("detectron2") is not None:
    from . import data, evaluation, modeling  # noqa: F401  (registration side effects)
    from .config import add_alrp_config

    __all__ = ["add_alrp_config"]
