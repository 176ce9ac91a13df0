"""The alrp-d2 test suite: pure-torch tests here, detectron2 integration tests in ``tests/d2``."""
