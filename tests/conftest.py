"""Shared test set-up: hypothesis profiles, one numba kernel cache for the whole run, and
an ``rng`` fixture.

Profiles: ``ci`` (default; derandomized, no deadline, ~25 examples per property) and
``thorough`` (500 examples): ``pytest --hypothesis-profile=thorough``.
"""

import contextlib
import os
import pathlib

# Before graphopt is imported: every test process shares one on-disk kernel cache.
_CACHE = pathlib.Path(__file__).resolve().parent.parent / ".graphopt_cache" / "test"
os.environ.setdefault("GRAPHOPT_CACHE_DIR", str(_CACHE))

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, Phase, settings  # noqa: E402

_QUIET = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
          HealthCheck.large_base_example]
# No explain phase in CI: it re-runs failing examples under a line tracer (minutes on this
# suite); ``pytest --hypothesis-explain`` brings it back.
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=25,
                          suppress_health_check=_QUIET, print_blob=True,
                          phases=[p for p in Phase if p is not Phase.explain])
settings.register_profile("thorough", deadline=None, max_examples=500,
                          suppress_health_check=_QUIET)
# pytest's --hypothesis-profile option loads its profile after this and wins.
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    config.addinivalue_line("markers", "thorough: long runs (fuzzing, soaks); run with "
                            "GRAPHOPT_THOROUGH=1 or --hypothesis-profile=thorough")


def thorough_run(config) -> bool:
    return os.environ.get("GRAPHOPT_THOROUGH") == "1" or \
        config.getoption("hypothesis_profile", None) == "thorough"


def pytest_collection_modifyitems(config, items):
    if thorough_run(config):
        return
    skip = pytest.mark.skip(reason="thorough only: GRAPHOPT_THOROUGH=1 or "
                            "--hypothesis-profile=thorough")
    for item in items:
        if "thorough" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded NumPy generator (a fresh one per test)."""
    return np.random.default_rng(20240601)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, private path cache for one test (nothing kept in this process either)."""
    from graphopt.contraction.search import cache as path_cache

    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("GRAPHOPT_CACHE_DIR", str(d))
    path_cache.clear_memo()
    yield d
    path_cache.clear_memo()


def _forget_planned_steps():
    from graphopt.compiler import driver as compiler
    from graphopt.contraction.program import build, forms, run

    build._built_step.cache_clear()
    forms._step_forms.cache_clear()
    run.path_contraction.cache_clear()
    run.shared_programs.cache_clear()
    compiler.clear_cache()


_OWN_RATES: list = []    # graphopt's own host table, read before any test swapped it


@contextlib.contextmanager
def small_pair_work(value: int | None):
    """Pairs planned by the host's rates with ``small_pair_work`` ``value`` (0: every pair
    step or pairwise node that maps onto a GEMM that sums something is one, however small;
    None: graphopt's own), nothing planned before kept."""
    import dataclasses

    from graphopt.backends import BACKENDS
    from graphopt.contraction import rates

    if not _OWN_RATES:
        _OWN_RATES.append(rates.HOST_RATES)
    own, current = _OWN_RATES[0], rates.HOST_RATES
    table = own if value is None else dataclasses.replace(own, small_pair_work=value)
    _forget_planned_steps()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rates, "HOST_RATES", table)
        for backend in BACKENDS.values():
            if backend.rates is current:
                mp.setattr(backend, "rates", table)
        yield
    _forget_planned_steps()


@pytest.fixture(scope="module")
def gemm_every_step():
    """A module's contraction programs make every GEMM-shaped pair step a GEMM: its tests of
    the GEMM form use small arrays."""
    with small_pair_work(0):
        yield


@pytest.fixture(scope="module", params=["gemm", "small steps on np.einsum"])
def pair_step_form(request):
    """A module's tests run twice: every GEMM-shaped pair step a GEMM, then the default
    (pair steps below ``rates.SMALL_PAIR_WORK`` on np.einsum)."""
    with small_pair_work(0 if request.param == "gemm" else None):
        yield request.param


@pytest.fixture
def small_steps():
    """One test's contraction programs at the default ``rates.SMALL_PAIR_WORK`` (pair steps
    of fewer multiply-adds on np.einsum), inside a module that plans every one as a GEMM."""
    with small_pair_work(None):
        yield
