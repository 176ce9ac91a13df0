"""docs/configuration.md documents every key of add_alrp_config, by its full name, with its default."""

from .config_reference import REFERENCE_PAGE, added_keys, documented_keys, reference_mismatches


def test_the_reference_page_documents_every_key_and_default_of_add_alrp_config():
    documented, problems = documented_keys(REFERENCE_PAGE.read_text(encoding="utf-8"))
    mismatches = problems + reference_mismatches(documented, added_keys())
    assert not mismatches, "docs/configuration.md is out of date:\n" + "\n".join(mismatches)


def test_added_keys_are_the_keys_of_add_alrp_config_with_their_defaults():
    added = added_keys()
    assert added["MODEL.ALRP.DELTA"] == 1.0
    assert added["INPUT.SSD.CONTRAST_RANGE"] == (0.5, 1.5)
    assert added["SOLVER.LOG_PERIOD"] == 20
    assert "MODEL.RETINANET.NUM_CLASSES" not in added  # detectron2's own key, left at its default


PAGE = """
| key | default | rule |
|---|---|---|
| `MODEL.ALRP.DELTA` | `1.0` | > 0 |
| `MODEL.ALRP.LOC_ERROR` | `"giou"` | giou or iou |
| `INPUT.SSD.CONTRAST_RANGE` | `(0.5, 1.5)` | a range |

| detectron2 key | value of ours | effect |
|---|---|---|
| `MODEL.RESNETS.NORM` | `FrozenStatsBN` | not a key of add_alrp_config: not read |
"""
ADDED = {"MODEL.ALRP.DELTA": 1.0, "MODEL.ALRP.LOC_ERROR": "giou", "INPUT.SSD.CONTRAST_RANGE": (0.5, 1.5)}


def test_a_page_in_step_with_the_config_has_no_mismatch():
    documented, problems = documented_keys(PAGE)
    assert problems == []
    assert documented == ADDED
    assert reference_mismatches(documented, ADDED) == []


def test_an_added_key_is_named_with_its_default():
    documented, _ = documented_keys(PAGE)
    (mismatch,) = reference_mismatches(documented, {**ADDED, "MODEL.ALRP.CORR_WEIGHT": 0.2})
    assert "MODEL.ALRP.CORR_WEIGHT (default `0.2`) is added by add_alrp_config but not documented" in mismatch
    assert "| `MODEL.ALRP.CORR_WEIGHT` | `0.2` | <rule> |" in mismatch


def test_a_removed_key_is_named():
    documented, _ = documented_keys(PAGE)
    added = {key: value for key, value in ADDED.items() if key != "MODEL.ALRP.LOC_ERROR"}
    assert reference_mismatches(documented, added) == [
        "MODEL.ALRP.LOC_ERROR is documented in docs/configuration.md but add_alrp_config does not add it: "
        "remove its row"
    ]


def test_a_changed_default_is_named_with_the_expected_default():
    documented, _ = documented_keys(PAGE)
    for key, default in (("MODEL.ALRP.DELTA", 0.5), ("MODEL.ALRP.DELTA", 1), ("INPUT.SSD.CONTRAST_RANGE", [0.5, 1.5])):
        (mismatch,) = reference_mismatches(documented, {**ADDED, key: default})
        assert mismatch.startswith(f"{key}: add_alrp_config's default is `{default!r}`"), mismatch


def test_malformed_and_duplicate_rows_are_reported_with_their_line():
    page = "\n".join(
        (
            "| key | default | rule |",
            "|---|---|---|",
            "| `LOC_ERROR` | `giou` | a bare name |",
            "| `MODEL.ALRP.TAU` | 0.5 | no backticks |",
            "| `MODEL.ALRP.RANKING` | `per_worker` | |",
            "| `MODEL.ALRP.DELTA` | `1.0` | > 0 |",
            "| `MODEL.ALRP.DELTA` | `1.0` | > 0 |",
        )
    )
    documented, problems = documented_keys(page)
    assert documented == {"MODEL.ALRP.DELTA": 1.0}
    assert [problem.split(":")[0] for problem in problems] == [f"docs/configuration.md, line {n}" for n in (3, 4, 5, 7)]
    assert "a row must be | `FULL.KEY.NAME` | `default` | rule |" in problems[0]
    assert "| `MODEL.ALRP.TAU` | 0.5 | no backticks |" in problems[1]
    assert problems[3] == "docs/configuration.md, line 7: MODEL.ALRP.DELTA is documented twice"
