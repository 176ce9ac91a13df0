"""Tests that need detectron2 (skipped as a folder when it is not installed, see ``conftest.py``)."""
