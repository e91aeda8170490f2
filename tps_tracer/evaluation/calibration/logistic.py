"""Penalised, weighted logistic regression by Newton's method (convex; exact to ~1e-12).

Minimises  sum_i w_i [log(1 + e^{u_i}) - y_i u_i] + (lambda / 2) ||beta||^2,  u = a + X beta,
with no penalty on the intercept a (scikit-learn's LogisticRegression(C = 1 / lambda)
convention). Labels may be soft (y in [0, 1]), which the q_Z nuisance model needs for Monte
Carlo estimates. Used by the Platt calibrator (one feature) and the plug-in q_Z model.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

_NEWTON_STEPS = 100


def sigmoid(u: FloatArray) -> FloatArray:
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * u)), dtype=np.float64)  # overflow-free logistic


def fit_logistic(
    x: FloatArray, y: FloatArray, w: FloatArray, penalty: float, intercept0: float = 0.0
) -> tuple[float, FloatArray]:
    """(a, beta) for features x of shape (n, k); starts from a = intercept0, beta = 0."""
    x = np.asarray(x, dtype=np.float64).reshape(len(y), -1)
    design = np.column_stack([np.ones(len(y)), x])
    ridge = np.full(design.shape[1], float(penalty))
    ridge[0] = 0.0
    theta = np.zeros(design.shape[1])
    theta[0] = intercept0
    for _ in range(_NEWTON_STEPS):
        p = sigmoid(design @ theta)
        grad = design.T @ (w * (p - y)) + ridge * theta
        hess = (design * (w * p * (1.0 - p))[:, None]).T @ design + np.diag(ridge)
        hess[0, 0] += 1e-12  # all-one-label data: the intercept runs off slowly; keep H invertible
        step = np.linalg.solve(hess, grad)
        theta = theta - step
        if np.max(np.abs(step)) < 1e-12:
            break
    return float(theta[0]), theta[1:]
