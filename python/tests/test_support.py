"""fa.Support, the answer of is_supported: its truth is the answer (a (bool, str) tuple was always truthy), it
carries the reason, and its repr shows both. Needs neither the library nor torch."""

import fa
from fa.support import Support


def test_truth_is_the_answer():
    no = Support(False, "head_dim: expected a multiple of 8 in [8, 256], got 12")
    yes = Support(True)
    assert not no
    assert yes
    assert (1 if no else 0) == 0
    assert no.supported is False and yes.supported is True


def test_reason_is_carried_and_cleared_when_supported():
    no = Support(False, "dtype: expected 1, 2 or 3, got 9")
    assert no.reason == "dtype: expected 1, 2 or 3, got 9"
    assert Support(True, "ignored").reason == ""


def test_repr_and_str_show_answer_and_reason():
    no = Support(False, "mask: expected 0, 1 or 2, got 7")
    assert repr(no) == "Support(supported=False, reason='mask: expected 0, 1 or 2, got 7')"
    assert str(no) == "not supported: mask: expected 0, 1 or 2, got 7"
    assert repr(Support(True)) == "Support(supported=True, reason='')"
    assert str(Support(True)) == "supported"


def test_equality():
    assert Support(False, "a") == Support(False, "a")
    assert Support(False, "a") != Support(False, "b")
    assert Support(True) == True  # noqa: E712 -- compares with the bool answer
    assert Support(False, "x") == False  # noqa: E712
    assert len({Support(False, "a"), Support(False, "a")}) == 1


def test_exported_from_the_package():
    assert fa.Support is Support
