"""L2-regularised logistic regression on activations: standardised features, scipy's L-BFGS, torch maths.

The objective is scikit-learn's ``LogisticRegression(C=C)`` on standardised features (binary: one
logit and the logistic loss; more classes: the multinomial loss), ``C * sum(loss) + ||w||^2 / 2`` with
an unpenalised intercept, divided by ``C * n`` as scikit-learn does (so its ``tol`` means the same).
scipy's L-BFGS-B drives it; the loss and its gradient are computed by torch in
float32 (one matmul each way per evaluation), which is where the time goes. Weights come back in the
raw activation space (the standardisation folded in), so ``x @ w + b`` scores raw activations.

Example
-------
>>> fit = fit_logistic(x_ND, y_N, n_classes=2, C=1.0)
>>> (predict(fit, x_ND) == y_N).float().mean()
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class LogisticFit:
    """Raw-space weights ``W_CD`` (one row for two classes), biases ``b_C``, and how the solver ended."""

    W_CD: torch.Tensor
    b_C: torch.Tensor
    n_iter: int
    converged: bool


def standardize(x_ND: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-feature mean and standard deviation (constant features get 1, so they stay at 0)."""
    mean_D = x_ND.mean(0)
    std_D = x_ND.std(0, unbiased=False)
    return mean_D, torch.where(std_D > 1e-8, std_D, torch.ones_like(std_D))


def fit_logistic(x_ND: torch.Tensor, y_N: torch.Tensor, n_classes: int, C: float = 1.0, max_iter: int = 500,
                 tol: float = 1e-4) -> LogisticFit:  # fmt: skip
    """Fit one probe (see the module docstring); ``y_N`` holds class indices ``0..n_classes-1``.

    The objective is divided by ``C * n`` (the mean loss plus ``||w||^2 / (2 C n)``: the same optimum), so
    ``tol`` is scikit-learn's: L-BFGS stops when the largest gradient entry is below it.
    """
    from scipy.optimize import minimize

    x_ND = x_ND.float()
    mean_D, std_D = standardize(x_ND)
    z_ND = (x_ND - mean_D) / std_D
    n, d = z_ND.shape
    rows = 1 if n_classes == 2 else n_classes
    y_N = y_N.long()
    y_float = y_N.float()

    def loss_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        p = torch.from_numpy(theta.astype(np.float32)).view(rows, d + 1)
        W, b = p[:, :d], p[:, d]
        logits_NC = z_ND @ W.T + b
        if rows == 1:
            s = logits_NC[:, 0]
            loss = torch.nn.functional.softplus(s).sum() - (s * y_float).sum()
            err_NC = (torch.sigmoid(s) - y_float)[:, None]
        else:
            lse = torch.logsumexp(logits_NC, 1)
            loss = (lse - logits_NC.gather(1, y_N[:, None])[:, 0]).sum()
            err_NC = torch.softmax(logits_NC, 1)
            err_NC[torch.arange(n), y_N] -= 1.0
        gW = (err_NC.T @ z_ND) / n + W / (C * n)
        gb = err_NC.sum(0) / n
        total = float(loss) / n + 0.5 * float((W.double() ** 2).sum()) / (C * n)
        return total, torch.cat([gW, gb[:, None]], 1).double().flatten().numpy()

    theta0 = np.zeros(rows * (d + 1))
    # Dozens of mid-sized matmuls: one thread is several times faster than two on busy cores (measured).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = minimize(
            loss_grad,
            theta0,
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": max_iter, "gtol": tol, "ftol": 64 * np.finfo(float).eps, "maxls": 50},
        )
    finally:
        torch.set_num_threads(threads)
    p = torch.from_numpy(res.x).float().view(rows, d + 1)
    W_std, b_std = p[:, :d], p[:, d]
    W_raw = W_std / std_D
    b_raw = b_std - (W_std * (mean_D / std_D)).sum(1)
    # A line search that cannot decrease the loss further at float32 precision ends at the optimum too.
    done = bool(res.success) or "ABNORMAL" in str(res.message)
    return LogisticFit(W_raw.contiguous(), b_raw.contiguous(), int(res.nit), done)


def scores(fit: LogisticFit, x_ND: torch.Tensor) -> torch.Tensor:
    """Logits [N, C] (one column for two classes: the log-odds of class 1)."""
    return x_ND.float() @ fit.W_CD.T + fit.b_C


def predict(fit: LogisticFit, x_ND: torch.Tensor) -> torch.Tensor:
    """Class indices [N]."""
    s = scores(fit, x_ND)
    return (s[:, 0] > 0).long() if s.shape[1] == 1 else s.argmax(1)
