"""The shape every misconception catalogue of labs 04-06 shares: each wrong answer is rejected and its
feedback does not print the value asked for, each correct answer written differently is accepted, and the
catalogue holds enough of both."""
import pytest


def catalogue_tests(wrong, right, judge, leaks):
    """The catalogue's three tests; bind them to names starting with ``test_`` in the catalogue's module.

    ``wrong`` and ``right`` hold ``(exercise, idea, answer)``; ``judge(exercise, answer)`` calls the lab's
    check and returns ``(passed, message)``; ``leaks(exercise, answer, message)`` is True when the message
    gives the answer away."""
    def ids(rows):
        return [f"{e}: {i[:40]}" for e, i, _ in rows]

    @pytest.mark.parametrize("exercise, idea, answer", wrong, ids=ids(wrong))
    def test_wrong_answer_is_rejected(exercise, idea, answer):
        ok, msg = judge(exercise, answer)
        assert not ok, f"a wrong answer passed ({idea}): {msg}"
        assert not leaks(exercise, answer, msg), f"the feedback prints the value asked for ({idea}): {msg}"

    @pytest.mark.parametrize("exercise, idea, answer", right, ids=ids(right))
    def test_correct_alternative_is_accepted(exercise, idea, answer):
        ok, msg = judge(exercise, answer)
        assert ok, f"a correct answer ({idea}) was rejected: {msg}"

    def test_catalogue_is_big_enough():
        assert len(wrong) >= 8 and len(right) >= 2

    return test_wrong_answer_is_rejected, test_correct_alternative_is_accepted, test_catalogue_is_big_enough
