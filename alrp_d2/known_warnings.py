"""The third-party deprecation warnings every command of this project would print with the pinned torch, ignored by
the entry points (``train_net.py``, ``demo.py``, ``tools/``) before they import detectron2, as ``setup.cfg``'s
pytest filters ignore them: each by its message, category and module, so that any other warning still shows.
Standard library only: importing it imports neither torch nor detectron2."""

from __future__ import annotations

import warnings
from typing import Tuple, Type

#: (message regex, category, module regex): detectron2's ``@torch.jit.script`` decorators, applied on import; its
#: ``torch.meshgrid`` call without ``indexing``; its LazyConfig loader importing ``pkg_resources``.
THIRD_PARTY_DEPRECATIONS: Tuple[Tuple[str, Type[Warning], str], ...] = (
    (r"`torch\.jit\.script` is deprecated", FutureWarning, r"torch\.jit\._script"),
    (r"torch\.meshgrid. in an upcoming release", UserWarning, r"torch\.functional"),
    (r"pkg_resources is deprecated as an API", UserWarning, r"detectron2\.config\.lazy"),
)


def ignore_third_party_deprecations() -> None:
    """Adds a warnings filter for each of :data:`THIRD_PARTY_DEPRECATIONS`."""
    for message, category, module in THIRD_PARTY_DEPRECATIONS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
