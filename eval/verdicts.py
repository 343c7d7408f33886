"""The verdict words of every reading, from its test's outcome by one rule (issue 53).

A reading answers one question about two arms (or one arm against its null) with the training run as the unit: a
quantity (a mean difference over runs), its 95 % t interval over runs and, where the config stated a margin before
the run, the 90 % t interval of the two one-sided tests. The word is decided by :func:`verdict` alone:

1. fewer than two runs, or no interval: ``not tested`` (one run gives no interval over runs);
2. a failed validity check (a placebo whose interval excludes 0): ``inconclusive``;
3. a margin stated: ``equivalent`` when the 90 % interval lies inside +-margin, else ``not shown`` (the equivalence
   was not shown; the 95 % interval then says in which direction, if it excludes 0);
4. no margin: the question's word for "above" when the 95 % interval lies above 0, its word for "below" when it lies
   below 0, else its word for "none" (``none detected``, ``no cost detected``): nothing of the size the interval
   excludes, never "no effect".

The questions' words (:data:`QUESTIONS`) are the only wording a report, summary.json or the docs use for a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

NOT_TESTED = "not tested"
INCONCLUSIVE = "inconclusive"
EQUIVALENT = "equivalent"
NOT_SHOWN = "not shown"


@dataclass(frozen=True)
class Question:
    """The words of one kind of reading: the verdict when the interval lies above 0, below 0, or includes 0."""

    above: str
    below: str
    none: str


QUESTIONS = {
    "difference": Question("higher", "lower", "none detected"),
    "cost": Question("cost", "gain", "no cost detected"),  # a loss difference: higher = worse
    "leak": Question("leak detected", "below the null", "none detected"),
    "detected": Question("detected", "detected (negative)", "not detected"),  # a positive control read against a null
    "trend": Question("rising", "falling", "no trend detected"),
}


def verdict(
    question: str,
    ci_low: float | None,
    ci_high: float | None,
    n: int | None,
    *,
    margin: float | None = None,
    ci90_low: float | None = None,
    ci90_high: float | None = None,
    valid: bool = True,
) -> str:
    """The verdict word of one reading by the rule of this module's docstring."""
    words = QUESTIONS[question]
    if not n or n < 2 or ci_low is None or ci_high is None:
        return NOT_TESTED
    if not valid:
        return INCONCLUSIVE
    if margin is not None:
        inside = ci90_low is not None and ci90_high is not None and -margin < ci90_low and ci90_high < margin
        return EQUIVALENT if inside else NOT_SHOWN
    if ci_low > 0:
        return words.above
    if ci_high < 0:
        return words.below
    return words.none


def p_verdict(question: str, p_value: float | None, estimate: float | None, alpha: float = 0.05) -> str:
    """The same words from a test that gives a p-value rather than an interval (an exact test: a trend across sizes,
    McNemar within one run): the question's "above" / "below" word by the estimate's sign where p < ``alpha``, else
    its "none" word; ``not tested`` without a p-value."""
    words = QUESTIONS[question]
    if p_value is None or estimate is None:
        return NOT_TESTED
    if p_value < alpha:
        return words.above if estimate > 0 else words.below
    return words.none
