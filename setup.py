"""alrp-d2: aLRP Loss (NeurIPS 2020) for detectron2."""
from setuptools import find_packages, setup

setup(
    name="alrp_d2",
    version="0.1.0",
    description="aLRP Loss: a ranking-based, balanced loss unifying classification and localisation, for detectron2",
    packages=find_packages(include=["alrp_d2", "alrp_d2.*"]),
    python_requires=">=3.9",
    install_requires=[
        "torch>=2.0",
        "torchvision>=0.15",
        "fvcore",
        "pycocotools>=2.0.2",
        "opencv-python",
        "matplotlib",
    ],
    extras_require={"test": ["pytest>=7"]},
)
