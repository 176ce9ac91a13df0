"""alrp-d2: aLRP Loss (NeurIPS 2020) for detectron2."""

from setuptools import find_packages, setup

setup(
    name="alrp_d2",
    version="0.1.0",
    description="aLRP Loss: a ranking-based, balanced loss unifying classification and localisation, for detectron2",
    license="Apache-2.0",
    packages=find_packages(include=["alrp_d2", "alrp_d2.*"]),
    python_requires=">=3.9",
    # detectron2 is not on PyPI: install it from source first (README, "Install").
    install_requires=[
        "torch>=2.0",
        "torchvision>=0.15",
        "numpy",
        "fvcore",
        "pycocotools>=2.0.2",
        "opencv-python",
        "Pillow",
        "tabulate",
        "tqdm",
    ],
    extras_require={
        # tools/plot_training.py
        "plots": ["matplotlib"],
        # configs/ViTDet: detectron2's ViT backbone imports timm (DropPath, Mlp)
        "vitdet": ["timm"],
        # the test suite (scipy: Spearman references) and the checks CI runs before it
        "test": ["pytest>=7", "scipy", "matplotlib", "ruff", "mypy"],
    },
)
