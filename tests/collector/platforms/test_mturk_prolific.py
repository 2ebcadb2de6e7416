"""MTurk (what we send through boto3, entry and exit; no AWS call) and Prolific adapters."""

from __future__ import annotations

from decimal import Decimal
from xml.etree import ElementTree

import pytest

from collector.platforms import EntryRefused, PlatformCredentialsError, PlatformError, get_adapter
from collector.platforms.mturk import (
    EXTERNAL_QUESTION_SCHEMA,
    answer_code,
    external_question_xml,
    hit_params,
    mturk_client,
)
from collector.platforms.prolific import external_study_url
from tests.factories import make_dataset, make_study

pytestmark = pytest.mark.django_db


@pytest.fixture
def study(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.PUBLIC_BASE_URL = "https://clicklab.example.org"
    return make_study(make_dataset(tmp_path, n_images=2, size=(32, 24)), platform="mturk")


def test_external_question_is_valid_xml_with_the_https_url():
    xml = external_question_xml(url="https://clicklab.example.org/mturk/3/pc/?a=1&b=2", frame_height_px=800)
    root = ElementTree.fromstring(xml)
    assert root.tag == f"{{{EXTERNAL_QUESTION_SCHEMA}}}ExternalQuestion"
    ns = {"q": EXTERNAL_QUESTION_SCHEMA}
    assert root.find("q:ExternalURL", ns).text == "https://clicklab.example.org/mturk/3/pc/?a=1&b=2"
    assert root.find("q:FrameHeight", ns).text == "800"
    with pytest.raises(PlatformError, match="PUBLIC_BASE_URL"):
        external_question_xml(url="http://insecure.example.org/")


def test_hit_params(study):
    params = hit_params(
        study=study, device="mobile", url="https://clicklab.example.org/mturk/1/mobile/", max_assignments=7,
        reward=Decimal("0.15"), qualification_id="Q1",
    )  # fmt: skip
    assert params["Reward"] == "0.15"
    assert params["MaxAssignments"] == 7
    # the batch's timeout, then time for the exit page to submit to MTurk (issue 32 item 6)
    assert params["AssignmentDurationInSeconds"] == study.session_timeout_s + 600
    study.platform_config = {"assignment_max_duration_s": study.session_timeout_s + 30}
    assert get_adapter("mturk").launch_problems(study=study) == [
        f"platform_config.assignment_max_duration_s: {study.session_timeout_s + 30} s leaves a worker whose batch "
        f"ends at the session timeout ({study.session_timeout_s} s) no time to submit on MTurk; use at least "
        f"{study.session_timeout_s + 120} s, or remove it for the default ({study.session_timeout_s + 600} s)."
    ]
    assert params["QualificationRequirements"] == [
        {
            "QualificationTypeId": "Q1",
            "Comparator": "DoesNotExist",
            "ActionsGuarded": "DiscoverPreviewAndAccept",
        }
    ]
    assert "phone" in params["Title"]
    assert "https://clicklab.example.org/mturk/1/mobile/" in params["Question"]


def test_answer_code_reads_the_externalsubmit_field():
    xml = (
        '<QuestionFormAnswers xmlns="http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/'
        '2005-10-01/QuestionFormAnswers.xsd"><Answer><QuestionIdentifier>other</QuestionIdentifier>'
        "<FreeText>x</FreeText></Answer><Answer><QuestionIdentifier>completion_code</QuestionIdentifier>"
        "<FreeText> 12-ABCDEFGHJK </FreeText></Answer></QuestionFormAnswers>"
    )
    assert answer_code(xml) == "12-ABCDEFGHJK"
    assert answer_code("<not xml") == ""


def test_mturk_entry_preview_refusal_and_finish(study, settings):
    adapter = get_adapter("mturk")
    preview = adapter.parse_entry(
        study=study, device="pc", params={"assignmentId": "ASSIGNMENT_ID_NOT_AVAILABLE"}
    )
    assert preview.is_preview
    with pytest.raises(EntryRefused, match="turkSubmitTo"):
        adapter.parse_entry(
            study=study, device="pc",
            params={"assignmentId": "A", "hitId": "H", "workerId": "W", "turkSubmitTo": "https://evil.example"},
        )  # fmt: skip
    entry = adapter.parse_entry(
        study=study, device="pc",
        params={"assignmentId": "A", "hitId": "H", "workerId": "W", "turkSubmitTo": "https://www.mturk.com/"},
    )  # fmt: skip
    assert entry.return_info == {"turk_submit_to": "https://www.mturk.com", "hit_id": "H"}

    class FinishedSession:
        completion_code = "5-ABCDEFGHJK"
        platform_assignment_id = "A"
        platform_state = {"turk_submit_to": "https://www.mturk.com"}

    action = adapter.finish_action(session=FinishedSession())
    assert action.as_dict() == {
        "kind": "auto_post",
        "code": "5-ABCDEFGHJK",
        "url": "https://www.mturk.com/mturk/externalSubmit",
        "fields": {"assignmentId": "A", "completion_code": "5-ABCDEFGHJK"},
    }


def test_mturk_client_needs_keys_from_the_environment_and_uses_the_endpoint(settings):
    settings.AWS_ACCESS_KEY_ID = settings.AWS_SECRET_ACCESS_KEY = ""
    with pytest.raises(PlatformCredentialsError, match="AWS_ACCESS_KEY_ID"):
        mturk_client()
    settings.AWS_ACCESS_KEY_ID, settings.AWS_SECRET_ACCESS_KEY = "AKIAEXAMPLEKEY", "secret-example-value"
    settings.MTURK_ENDPOINT_URL = "http://127.0.0.1:9/mturk"
    assert mturk_client().meta.endpoint_url == "http://127.0.0.1:9/mturk"
    settings.MTURK_ENDPOINT_URL, settings.MTURK_SANDBOX = "", True
    assert "sandbox" in mturk_client().meta.endpoint_url


def test_prolific_entry_and_finish(study):
    study.platform = "prolific"
    study.platform_config = {"prolific_study_id": "ps-1"}
    adapter = get_adapter("prolific")
    entry = adapter.parse_entry(
        study=study, device="pc", params={"PROLIFIC_PID": "p1", "STUDY_ID": "ps-1", "SESSION_ID": "s1"}
    )
    assert (entry.external_worker_id, entry.external_assignment_id, entry.external_batch_id) == (
        "p1",
        "s1",
        "ps-1",
    )
    with pytest.raises(EntryRefused, match="another Prolific study"):
        adapter.parse_entry(
            study=study, device="pc", params={"PROLIFIC_PID": "p1", "STUDY_ID": "x", "SESSION_ID": "s1"}
        )
    with pytest.raises(EntryRefused, match="PROLIFIC_PID"):
        adapter.parse_entry(
            study=study, device="pc", params={"PROLIFIC_PID": "{{%PROLIFIC_PID%}}", "SESSION_ID": "s1"}
        )

    class FinishedSession:
        completion_code = "5-ABCDEFGHJK"

    FinishedSession.study = study
    assert adapter.finish_action(session=FinishedSession()).url == (
        "https://app.prolific.com/submissions/complete?cc=5-ABCDEFGHJK"
    )
    study.platform_config["prolific_completion_code"] = "CABC123"
    assert adapter.finish_action(session=FinishedSession()).url.endswith("?cc=CABC123")
    assert external_study_url(study_id=4, device="mobile") == (
        "https://clicklab.example.org/prolific/4/mobile/?PROLIFIC_PID={{%PROLIFIC_PID%}}"
        "&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"
    )
