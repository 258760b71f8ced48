"""The largest certified radius CERTIFY can give, the bound every stored radius is checked
against (rows, legacy DDRS memory files, imported logs)."""

from __future__ import annotations

import typing

import numpy as np


def max_radius(sigma: typing.Any, n: typing.Any, alpha: typing.Any) -> typing.Any:
    """The largest radius CERTIFY can give: nA = n, p̲A = α^(1/n), radius σ·Φ⁻¹(p̲A)."""
    from scipy.special import ndtri  # here: scipy is imported only when rows are checked

    return sigma * ndtri(np.power(alpha, 1.0 / n))
