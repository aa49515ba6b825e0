"""The answer clock that liveness judgements use, and the retry backoff
(fluxes/domain/liveness.py)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from fluxes.domain.liveness import AnswerClock, Backoff

LIMIT = 10.0  # a lease TTL, an exec-timeout


def answering(clock: AnswerClock, start: float, end: float, every: float = 0.5) -> None:
    """Redis answers the process every ``every`` s from ``start`` to ``end``."""
    t = start
    while t <= end:
        clock.answered(t)
        t += every


def test_a_process_redis_answers_judges_in_time() -> None:
    clock = AnswerClock()
    answering(clock, 0.0, 30.0)
    assert clock.may_judge(30.0, LIMIT)


def test_after_a_stall_a_judge_waits_a_whole_limit_of_answered_time() -> None:
    """A 12 s and a 30 s stall (the process's calls blocked, answered at its end)."""
    for stall in (12.0, 30.0):
        clock = AnswerClock()
        answering(clock, 0.0, 20.0)
        clock.answered(20.0 + stall)  # the call held by the stall returns
        answering(clock, 20.0 + stall, 20.0 + stall + LIMIT - 0.5)
        assert not clock.may_judge(20.0 + stall + LIMIT - 0.5, LIMIT)
        answering(clock, 20.0 + stall + LIMIT - 0.5, 20.0 + stall + LIMIT + 0.5)
        assert clock.may_judge(20.0 + stall + LIMIT + 0.5, LIMIT)


def test_errors_of_a_stall_count_from_the_last_one() -> None:
    clock = AnswerClock()
    answering(clock, 0.0, 5.0)
    for t in range(6, 36, 2):  # BUSY answered every 2 s for 30 s (the backoff)
        clock.unanswered(float(t))
    answering(clock, 36.0, 45.5)  # the wait for Redis ended with its first answer, at 36
    assert not clock.may_judge(45.5, LIMIT)
    answering(clock, 45.5, 46.5)
    assert clock.may_judge(46.5, LIMIT)


def test_a_judge_whose_own_call_is_slow_now_waits() -> None:
    clock = AnswerClock()
    answering(clock, 0.0, 5.0)
    assert not clock.may_judge(5.0 + LIMIT / 2, LIMIT)


def test_short_silences_change_nothing() -> None:
    clock = AnswerClock()
    answering(clock, 0.0, 10.0)
    answering(clock, 13.0, 20.0)  # a 3 s wait: less than a third of the limit
    assert clock.may_judge(20.0, LIMIT)
    other = AnswerClock()
    answering(other, 0.0, 10.0)
    answering(other, 13.0, 17.5)
    assert not other.may_judge(17.5, 6.0)  # but more than a third of 6 s


def test_before_any_answer_nothing_is_judged() -> None:
    assert not AnswerClock().may_judge(100.0, LIMIT)


@given(st.lists(st.floats(0.01, 40.0), min_size=1, max_size=40), st.floats(3.0, 60.0))
def test_a_live_thing_is_never_judged_stale_by_the_rule(waits: list[float], limit: float) -> None:
    """Whatever the waits between answers: whenever the judge may judge, it has had
    answers for the last ``limit`` s at most a third of ``limit`` apart, so something that
    beats every fifth of the limit while Redis answers was seen in the last half limit."""
    clock = AnswerClock()
    t = 0.0
    answers = [t]
    clock.answered(t)
    for wait in waits:
        t += wait
        clock.answered(t)
        answers.append(t)
        if clock.may_judge(t, limit):
            recent = [a for a in answers if t - a <= limit]
            gaps = [b - a for a, b in itertools.pairwise(recent)]
            assert all(g <= limit / 3 + 1e-9 for g in gaps)


def test_backoff_doubles_up_to_its_bound_and_reports_the_episode() -> None:
    backoff = Backoff(first=0.05, most=2.0)
    delays = [backoff.failed(float(i)) for i in range(10)]
    assert delays[:3] == [0.05, 0.1, 0.2] and max(delays) == 2.0
    assert backoff.failures == 10
    assert backoff.succeeded(12.5) == 12.5
    assert backoff.succeeded(13.0) is None
    assert backoff.failed(14.0) == 0.05
    assert backoff.first_failure
