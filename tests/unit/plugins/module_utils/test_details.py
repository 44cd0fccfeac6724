import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import details
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError


def test_auto_details_are_full_up_to_the_limit_then_a_summary():
    assert details.detail_level("auto", 3, limit=3) == "full"
    assert details.detail_level("auto", 4, limit=3) == "summary"
    assert details.detail_level("full", 4, limit=3) == "full"
    assert details.detail_level("summary", 3, limit=3) == "summary"
    assert details.detail_level("auto", details.DETAIL_LIMIT) == "full"
    assert details.detail_level("auto", details.DETAIL_LIMIT + 1) == "summary"
    with pytest.raises(PipelineError, match="details must be one of"):
        details.detail_level("all", 3)


def test_a_summary_keeps_at_most_the_limit_and_never_a_negative_count():
    assert details.kept_rows() == details.DETAIL_LIMIT
    assert details.kept_rows(5) == 5
    assert details.kept_rows(-1) == 0
