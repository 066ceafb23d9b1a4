r"""How far can a network shrink on its data: :func:`data_profile` (ours, after the paper's
effective-dimension corollary).

The paper's corollary on an exact analytic parameterisation says that when every input is
``x = iota(u)`` with ``u`` in an ``m``-dimensional domain, the widths scale with
``D_k = C(m + k, m)``, not with the input dimension ``d_in``. A user with data and no ``iota``
can measure the same thing from the data:

- per compressible set (hidden layer), the **singular values** ``s_1 >= s_2 >= ...`` of its
  activations at the data, ``Z[p, i] = h_i(x_p)`` (the features :func:`jaxcompress.data_matching`
  selects on; a tied set stacks its consumed tensors' rows). Keeping ``n`` neurons chosen by a
  rank-revealing selection reproduces the next layer's input at the data to about
  ``s_(n+1) / s_1`` relative error, so the **numerical rank** at a tolerance,
  ``r = #{i : s_i > rtol * s_1}``, is the width data matching needs there;
- the data's **intrinsic dimension** ``m`` by the TwoNN estimator (Facco, d'Errico, Rodriguez &
  Laio 2017): with ``r_1 < r_2`` a point's distances to its two nearest neighbours, the ratio
  ``mu = r_2 / r_1`` has the law ``P(mu > t) = t^-m`` on an ``m``-dimensional manifold, whose
  maximum-likelihood estimate is

  .. math:: \hat m = \frac{N}{\sum_{p=1}^N \log \mu_p};

  noise off the manifold raises it at the scale of the nearest-neighbour distances (the data
  look ``d_in``-dimensional there), so it is an upper estimate for noisy data;
- the paper's **width scale** ``C(m + k, m)`` at that ``m`` (:meth:`DataProfile.width_scale`),
  and the order whose ``D_k`` matches each set's rank (:meth:`DataProfile.orders`).

``jc.data_matching(x, rtol=...)`` uses the ranks as its widths. The public entry point is
:func:`jaxcompress.data_profile` (any network); :func:`network_profile` takes a traced network.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress import driver
from jaxcompress._checks import as_real_array, check_finite
from jaxcompress.domains import Points
from jaxcompress.features import DataFeatures
from jaxcompress.methods import BestOf, Method
from jaxcompress.networks import as_network
from jaxcompress.taylor import num_monomials

__all__ = ["DataProfile", "SetProfile", "data_profile", "intrinsic_dimension", "network_profile",
           "rank_widths"]

#: Rows the intrinsic-dimension estimate uses at most (a deterministic, evenly strided subset).
INTRINSIC_POINTS = 4096


@dataclasses.dataclass(frozen=True)
class SetProfile:
    """One compressible set at the data.

    Attributes:
      name: how messages name the set (``"hidden layer 1"``, ``"groups 2, 3"``).
      width: its current width.
      singular_values: ``s_1 >= s_2 >= ...`` of its activations at the data (``min(rows, width)``
        of them).
      rank: the numerical rank at the profile's ``rtol`` (at least 1).
    """

    name: str
    width: int
    singular_values: np.ndarray
    rank: int

    def rank_at(self, rtol: float) -> int:
        """``#{i : s_i > rtol * s_1}`` (at least 1)."""
        s = self.singular_values
        return max(1, int(np.sum(s > rtol * s[0]))) if s.size and s[0] > 0 else 1


@dataclasses.dataclass(frozen=True)
class DataProfile:
    """What the data say about how far a network can shrink (see the module docstring).

    Attributes:
      sets: one :class:`SetProfile` per compressible set, in the driver's order.
      rtol: the tolerance of the ranks.
      num_points: the rows the activations were measured at.
      input_dim: ``d_in``.
      intrinsic_dim: the TwoNN estimate ``m`` of the data's dimension (NaN where it is undefined:
        fewer than 3 distinct points, or neighbours all equally spaced; see
        :func:`intrinsic_dimension`).
    """

    sets: tuple[SetProfile, ...]
    rtol: float
    num_points: int
    input_dim: int
    intrinsic_dim: float

    @property
    def widths(self) -> tuple[int, ...]:
        """The numerical ranks: the widths ``jc.data_matching(x, rtol=rtol)`` keeps."""
        return tuple(s.rank for s in self.sets)

    def ranks(self, rtol: float) -> tuple[int, ...]:
        """The numerical ranks at another tolerance."""
        return tuple(s.rank_at(rtol) for s in self.sets)

    def width_scale(self, order: int, dim: int | None = None) -> int:
        """The paper's ``D_k = C(m + k, m)`` at ``m = round(intrinsic_dim)`` (or ``dim``)."""
        m = self._dim(dim)
        return num_monomials(m, int(order))

    def orders(self, dim: int | None = None) -> tuple[int, ...]:
        """Per set, the smallest ``k`` with ``C(m + k, m) >= rank``: the Taylor order the data's
        rank corresponds to in ``m`` dimensions."""
        m = self._dim(dim)
        out = []
        for s in self.sets:
            k = 0
            while num_monomials(m, k) < s.rank:
                k += 1
            out.append(k)
        return tuple(out)

    def _dim(self, dim) -> int:
        if dim is not None:
            return int(dim)
        if not np.isfinite(self.intrinsic_dim):
            raise ValueError("DataProfile: no intrinsic dimension was estimated (fewer than 3 "
                             "distinct points); pass dim=")
        return max(1, int(round(self.intrinsic_dim)))

    def __str__(self) -> str:
        m = self.intrinsic_dim
        head = (f"data profile at {self.num_points} points: d_in = {self.input_dim}, intrinsic "
                f"dimension ~ {m:.2f} (TwoNN), ranks at rtol = {self.rtol:g}")
        lines = [head, f"{'set':>16} {'width':>6} {'rank':>6} {'s_2/s_1':>9} "
                       f"{'s_r/s_1':>9} {'order in m':>10}"]
        try:
            orders = self.orders()
        except ValueError:
            orders = ("-",) * len(self.sets)
        for s, k in zip(self.sets, orders, strict=True):
            sv = s.singular_values / s.singular_values[0]
            lines.append(f"{s.name:>16} {s.width:>6} {s.rank:>6} "
                         f"{(sv[1] if sv.size > 1 else 0.0):>9.2e} {sv[s.rank - 1]:>9.2e} "
                         f"{k!s:>10}")
        if np.isfinite(m):
            scale = ", ".join(f"k={k}: {self.width_scale(k)}" for k in range(1, 7))
            lines.append(f"width scale C(m + k, m) at m = {self._dim(None)}: {scale}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers (JSON-ready)."""
        return {"rtol": self.rtol, "num_points": self.num_points, "input_dim": self.input_dim,
                "intrinsic_dim": self.intrinsic_dim,
                "sets": [{"name": s.name, "width": s.width, "rank": s.rank,
                          "singular_values": [float(v) for v in s.singular_values]}
                         for s in self.sets]}

    def plot(self, path=None, *, ax=None, title: str | None = None):
        """The normalised singular values ``s_i / s_1`` of every set on a log scale, with
        ``rtol`` and each set's rank marked; saved to ``path`` when given. Returns the axes."""
        import matplotlib

        if ax is None:
            if path is not None:
                matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            fig, ax = plt.subplots(figsize=(6.4, 4.2), constrained_layout=True)
        else:
            fig = ax.figure
        for s in self.sets:
            sv = s.singular_values / s.singular_values[0]
            line, = ax.semilogy(np.arange(1, sv.size + 1), np.maximum(sv, 1e-17),
                                label=f"{s.name} (width {s.width}, rank {s.rank})")
            ax.axvline(s.rank, color=line.get_color(), lw=0.8, ls=":")
        ax.axhline(self.rtol, color="k", lw=0.8, ls="--", label=f"rtol = {self.rtol:g}")
        ax.set_xlabel("index i")
        ax.set_ylabel("s_i / s_1 of the activations at the data")
        ax.set_title(title or f"{self.num_points} points, d_in = {self.input_dim}, intrinsic "
                              f"dimension ~ {self.intrinsic_dim:.1f}")
        ax.legend(fontsize=8)
        if path is not None:
            fig.savefig(path, dpi=120)
        return ax


def intrinsic_dimension(x, *, max_points: int = INTRINSIC_POINTS) -> float:
    """The TwoNN maximum-likelihood estimate of the dimension of the data ``x`` (``(N, d)``;
    see the module docstring), on at most ``max_points`` evenly strided rows. Duplicate points
    are ignored.

    Raises:
      ValueError: with fewer than 3 distinct points, or when the estimate is undefined: every
        point's second-nearest neighbour as near as its nearest (``log mu = 0`` everywhere, as
        on a regular grid), which would make it infinite.
    """
    x = np.asarray(x, np.float64)
    if x.ndim != 2:
        raise ValueError(f"intrinsic_dimension: x must be (N, d), got shape {x.shape}")
    if x.shape[0] > max_points:
        x = x[np.linspace(0, x.shape[0] - 1, max_points).round().astype(int)]
    rows = x.shape[0]
    x = np.unique(x, axis=0)
    n = x.shape[0]
    if n < 3:
        raise ValueError(f"intrinsic_dimension: x needs at least 3 distinct points (the TwoNN "
                         f"estimate reads each point's two nearest neighbours); got {rows} rows, "
                         f"{n} distinct")
    sq = np.sum(x * x, axis=1)
    r1 = np.empty(n)
    r2 = np.empty(n)
    chunk = max(1, 2**22 // n)
    for start in range(0, n, chunk):
        rows = slice(start, min(n, start + chunk))
        d2 = sq[rows, None] + sq[None] - 2.0 * x[rows] @ x.T
        d2[np.arange(d2.shape[0]), np.arange(start, start + d2.shape[0])] = np.inf
        two = np.partition(np.maximum(d2, 0.0), 1, axis=1)[:, :2]
        r1[rows], r2[rows] = np.sqrt(two[:, 0]), np.sqrt(two[:, 1])
    ok = r1 > 0
    mu = r2[ok] / r1[ok]
    total = float(np.sum(np.log(mu)))
    # mean log mu at rounding level (distances from |a|^2 + |b|^2 - 2 a.b): mu = 1 everywhere
    if not total > 1e-9 * max(int(ok.sum()), 1):
        raise ValueError(f"intrinsic_dimension: the TwoNN estimate is undefined on x: each of its "
                         f"{n} distinct points has its two nearest neighbours at the same "
                         "distance (a regular grid?); estimate it on random or jittered points")
    return float(ok.sum() / total)


def _intrinsic_or_nan(x) -> float:
    """The profile's estimate: NaN (said so, never a plausible number) where it is undefined."""
    try:
        return intrinsic_dimension(x)
    except ValueError:
        return float("nan")


def network_profile(net, x, *, rtol: float = 1e-6, where: str = "data_profile",
                    intrinsic: bool = True) -> DataProfile:
    """:func:`jaxcompress.data_profile` of a :class:`~jaxcompress.Network` (host side); without
    ``intrinsic`` the TwoNN estimate (``O(N^2)`` distances) is skipped and reads NaN."""
    if not (isinstance(rtol, (int, float, np.floating)) and 0 < float(rtol) < 1):
        raise ValueError(f"{where}: rtol must be a number in (0, 1), got {rtol!r}")
    if isinstance(x, jax.core.Tracer):
        raise TypeError(f"{where}: x must be concrete (host-side diagnostic, not under jax.jit)")
    x = as_real_array(x, where, "x")
    check_finite(x, where, "x")
    d = int(net.x.shape[-1])
    if x.ndim != 2 or x.shape[1] != d or x.shape[0] < 1:
        raise ValueError(f"{where}: x has shape {x.shape}; expected (N, {d}) (the network takes "
                         f"inputs of size {d})")
    if not net.compressible:
        raise ValueError(f"{where}: the network has no compressible group:\n" + str(net))
    if any(isinstance(v, jax.core.Tracer) for v in net.leaves):
        raise TypeError(f"{where}: the parameters must be concrete (host-side diagnostic)")
    xs = jnp.asarray(x, net.x.dtype)
    got = driver.features(net.plan(), DataFeatures(xs), net.leaves, Points(xs))
    sets = []
    for i, name in enumerate(net.set_names()):
        z = np.asarray(got[i][0].z, np.float64)
        sv = np.linalg.svd(z, compute_uv=False)
        prof = SetProfile(name=name, width=int(z.shape[1]), singular_values=sv, rank=1)
        sets.append(dataclasses.replace(prof, rank=prof.rank_at(float(rtol))))
    return DataProfile(sets=tuple(sets), rtol=float(rtol), num_points=int(x.shape[0]),
                       input_dim=d,
                       intrinsic_dim=_intrinsic_or_nan(x) if intrinsic else float("nan"))


def rank_widths(net, method, where: str):
    """``method`` with its widths from the data's numerical ranks where it asks for them
    (``jc.data_matching(x, rtol=...)`` without ``widths=``), else ``method`` unchanged."""
    def one(m):
        if not (isinstance(m, Method) and isinstance(m.features, DataFeatures)
                and m.features.rtol is not None and m.widths is None):
            return m
        leaves = [m.features.x, *net.leaves]
        if any(isinstance(v, jax.core.Tracer) for v in leaves):
            raise TypeError(f"{where}: data_matching(x, rtol=...) measures the ranks on the host, "
                            "so it needs concrete data and parameters (not under jax.jit): take "
                            "the widths from jc.data_profile(net, x, rtol=...).widths outside "
                            "and pass widths=")
        return m.with_widths(network_profile(net, m.features.x, rtol=m.features.rtol,
                                             where=where, intrinsic=False).widths)

    if isinstance(method, BestOf):
        return dataclasses.replace(method, methods=tuple(one(m) for m in method.methods))
    return one(method)


def data_profile(net, x, *, activation=None, rtol: float = 1e-6) -> DataProfile:
    """The singular-value profile of every compressible set's activations at the data ``x``,
    their numerical ranks at ``rtol``, the data's intrinsic dimension and the paper's width scale
    (see :mod:`jaxcompress.profile`). Host side (concrete parameters and data).

    Args:
      net: any network :func:`jaxcompress.compress` takes (a params list with ``activation=``,
        ``jc.trace(...)``, a module, a loaded file).
      x: ``(N, d_in)`` inputs, real and finite.
      activation: for a params list.
      rtol: the tolerance of the ranks, in ``(0, 1)``.

    >>> params = [{"kernel": 0.3 * layer["kernel"], "bias": layer["bias"]}
    ...           for layer in jc.init_mlp(jax.random.PRNGKey(0), [32, 64, 64, 1])]
    >>> u = jax.random.uniform(jax.random.PRNGKey(1), (500, 2), minval=-1, maxval=1)
    >>> x = jnp.tanh(u @ jax.random.normal(jax.random.PRNGKey(2), (2, 32)))  # a 2-D surface
    >>> prof = jc.data_profile(params, x, activation="tanh", rtol=1e-6)
    >>> round(prof.intrinsic_dim)
    2
    >>> prof.widths                        # of 64 neurons each, 32 inputs
    (55, 43)
    """
    where = "data_profile"
    return network_profile(as_network(net, activation=activation, where=where), x, rtol=rtol,
                           where=where)
