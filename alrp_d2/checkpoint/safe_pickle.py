"""Reading ``.pkl`` weight files without running code from them: an unpickler that builds only
containers, numbers, strings, bytes and numpy arrays, dtypes and scalars (what detectron2's
published ``.pkl`` weights hold) and refuses any other class or function the file names."""

from __future__ import annotations

import codecs
import importlib
import pickle
from typing import IO, Any, Callable, Dict, Tuple

import numpy as np

__all__ = ["UnsafePickleError", "load_weights_pickle"]


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle names a class or function other than those of numpy arrays (it could run code)."""


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles use it for ``bytes`` (``encode(text, 'latin1')``)."""
    if codecs.lookup(encoding).name != "iso8859-1":
        raise UnsafePickleError(f"_codecs.encode with encoding {encoding!r} (only latin1 is admitted)")
    return text.encode("latin1")


def _numpy_core_module(name: str) -> Any:
    """A module of numpy's core (``numpy._core`` from numpy 2, ``numpy.core`` before)."""
    for package in ("numpy._core", "numpy.core"):
        try:
            return importlib.import_module(f"{package}.{name}")
        except ImportError:
            continue
    raise ImportError(f"numpy has no core module {name}")


def _admitted_globals() -> Dict[Tuple[str, str], Callable[..., Any]]:
    multiarray = _numpy_core_module("multiarray")
    admitted: Dict[Tuple[str, str], Callable[..., Any]] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1_encode,
        ("collections", "OrderedDict"): dict,
    }
    numeric = _numpy_core_module("numeric")
    for core in ("numpy.core", "numpy._core"):  # pickles of numpy 1 and 2
        admitted[(f"{core}.multiarray", "_reconstruct")] = multiarray._reconstruct
        admitted[(f"{core}.multiarray", "scalar")] = multiarray.scalar
        admitted[(f"{core}.numeric", "_frombuffer")] = numeric._frombuffer  # arrays in pickle protocol 5
    return admitted


class _WeightsUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` whose ``find_class`` admits only the numpy names of weight files."""

    def __init__(self, file: IO[bytes], source: str):
        super().__init__(file, encoding="latin1")
        self.source = source
        self.admitted = _admitted_globals()

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.admitted:
            raise UnsafePickleError(
                f"refusing to load {self.source}: it names {module}.{name}, which is not part of weights "
                "(admitted: numpy arrays, numbers, strings and containers). A pickle naming other objects "
                "can run code when loaded; convert the weights to a state dict of arrays, or load them "
                "yourself if you trust the file."
            )
        return self.admitted[(module, name)]

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(f"refusing to load {self.source}: it holds a persistent id ({pid!r})")


def load_weights_pickle(file: IO[bytes], source: str) -> Any:
    """Unpickles ``file`` (latin1 strings, as detectron2 reads its Python 2 era ``.pkl`` files)
    admitting only containers, numbers, strings, bytes and numpy arrays, dtypes and scalars;
    raises :class:`UnsafePickleError` naming ``source`` and the refused name otherwise."""
    return _WeightsUnpickler(file, source).load()
