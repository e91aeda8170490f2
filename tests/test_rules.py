"""Score rules: closed forms against numerical integration, propriety, validation."""

import math

import mpmath
import numpy as np
import pytest

from tps_tracer import score
from tps_tracer.scoring import BetaRule, get_rule, parse_rules


@pytest.mark.parametrize("a,b", [(2, 4), (1, 1), (0.5, 0.5), (0.3, 2.5), (3.7, 0.8), (1, 7), (8, 8), (2, 14), (20, 3)])
@pytest.mark.parametrize("p", [0.0, 1e-4, 0.2, 0.5, 0.93, 1.0 - 1e-9, 1.0])
def test_beta_closed_form_matches_numerical_integration(a, b, p):
    # Oracle: mpmath's 30-digit incomplete beta integral int_x1^x2 c^(a-1) (1-c)^(b-1) dc
    # (hypergeometric series, independent of scipy). Plain quadrature is not accurate enough:
    # scipy's quad is off by ~1e-6 relative, mpmath's by ~1e-10, at the singular endpoints
    # of a, b < 1.
    with mpmath.workdps(30):
        s1_num = -mpmath.betainc(a, b + 1, p, 1)
        s0_num = -mpmath.betainc(a + 1, b, 0, p)
    s1, s0 = BetaRule(a, b).branches(np.array([p]))
    assert s1[0] == pytest.approx(float(s1_num), rel=1e-12, abs=1e-15)
    assert s0[0] == pytest.approx(float(s0_num), rel=1e-12, abs=1e-15)


def test_beta_1_1_is_half_brier():
    p = np.linspace(0, 1, 11)
    for y in (0, 1):
        np.testing.assert_allclose(score(p, y, "beta(1,1)"), score(p, y, "brier") / 2, atol=1e-15)


def test_beta_wrong_boundary_floors_are_beta_functions():
    from scipy.special import beta as B

    assert score(0.0, 1, "beta(2,4)") == pytest.approx(-B(2, 5))
    assert score(1.0, 0, "beta(2,4)") == pytest.approx(-B(3, 4))


def test_log_clips_at_1e_minus_6():
    assert score(0.0, 1, "log") == pytest.approx(math.log(1e-6))
    assert score(1.0, 0, "log") == pytest.approx(math.log(1e-6))
    assert score(0.7, 1, "log") == pytest.approx(math.log(0.7))
    assert score(0.7, 0, "log") == pytest.approx(math.log(0.3))


def test_brier_is_negative_squared_error():
    assert score(0.7, 1, "brier") == pytest.approx(-0.09)
    assert score(0.7, 0, "brier") == pytest.approx(-0.49)


@pytest.mark.parametrize("rule", ["log", "brier", "beta(2,4)", "beta(0.5,3)"])
def test_expected_score_is_uniquely_maximised_at_the_truth(rule):
    # A soft label q is the expected score under Y ~ Bernoulli(q).
    grid = np.linspace(0.001, 0.999, 999)
    for q in (0.05, 0.3, 0.5, 0.77, 0.95):
        expected = score(grid, np.full_like(grid, q), rule)
        assert grid[np.argmax(expected)] == pytest.approx(q, abs=1e-3)


@pytest.mark.parametrize("bad", [np.nan, -0.1, 1.2])
def test_score_rejects_invalid_forecasts(bad):
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        score([0.5, bad], [1, 0], "log")


def test_score_rejects_invalid_outcomes():
    with pytest.raises(ValueError, match="outcome"):
        score([0.5], [2], "brier")


def test_rule_names_parse_and_round_trip():
    rules = parse_rules("log, brier,beta(2,4),beta(0.5, 1.5)")
    assert [r.name for r in rules] == ["log", "brier", "beta(2,4)", "beta(0.5,1.5)"]
    assert get_rule(rules[3].name) == rules[3]


@pytest.mark.parametrize("text", ["logg", "beta(0,1)", "beta(-1,2)", "beta(a,b)", "beta(1)"])
def test_bad_rule_names_raise(text):
    with pytest.raises(ValueError):
        get_rule(text)


def test_integer_beta_closed_form_equals_scipy_betainc() -> None:
    """Integer a + b <= 16 is summed as a binomial tail without scipy; it must equal scipy's
    regularised incomplete beta (the path every other beta rule takes) to rounding."""
    from scipy import special

    p = np.concatenate([np.linspace(0.0, 1.0, 2001), [1e-300, 1e-12, 1e-6, 1 - 1e-6, 1 - 1e-12]])
    for a in range(1, 16):
        for b in range(1, 17 - a):
            s1, s0 = BetaRule(a, b).branches(p)
            want1 = -special.beta(a, b + 1.0) * special.betainc(b + 1.0, a, 1.0 - p)
            want0 = -special.beta(a + 1.0, b) * special.betainc(a + 1.0, b, p)
            np.testing.assert_allclose(s1, want1, rtol=1e-13, atol=0, err_msg=f"beta({a},{b}) S(p,1)")
            np.testing.assert_allclose(s0, want0, rtol=1e-13, atol=0, err_msg=f"beta({a},{b}) S(p,0)")


@pytest.mark.parametrize("a,b", [(2, 4), (1, 1), (1.5, 3)])
def test_beta_matches_plain_quadrature_where_integrand_is_smooth(a, b):
    from scipy.integrate import quad

    for p in (0.1, 0.5, 0.9):
        s1, s0 = BetaRule(a, b).branches(np.array([p]))
        assert s1[0] == pytest.approx(-quad(lambda c: c ** (a - 1) * (1 - c) ** b, p, 1)[0], rel=1e-8)
        assert s0[0] == pytest.approx(-quad(lambda c: c**a * (1 - c) ** (b - 1), 0, p)[0], rel=1e-8)
