"""opprof.nd.test_utils, MXNet's test helpers, through their public API.

MXNet's own unit tests pass or fail by these helpers: a tolerance that is too loose would let a
wrong result pass, one that is too tight would fail a right one; so each check here is made on
both sides of its threshold.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import opprof as mx
from opprof.nd import test_utils as tu


# ---------------------------------------------------------------------------- tolerances
def test_float32_defaults_pass_inside_and_fail_outside() -> None:
    # float32: rtol 1e-4, atol 1e-3, so |a - b| <= 1e-3 + 1e-4 * |b|.
    b = np.full((3,), 10.0, np.float32)
    tu.assert_almost_equal(b + np.float32(0.0019), b)
    with pytest.raises(AssertionError, match="exceeds tolerance"):
        tu.assert_almost_equal(b + np.float32(0.0025), b)


def test_float64_defaults_are_tighter_than_float32() -> None:
    b = np.full((3,), 10.0)
    tu.assert_almost_equal(b * (1 + 5e-6), b)
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(b * (1 + 2e-5), b)
    # Mixed dtypes use the looser of the two defaults (float32's here).
    tu.assert_almost_equal(b * (1 + 2e-5), b.astype(np.float32))


def test_given_tolerances_and_dtype_dicts_override_the_defaults() -> None:
    a, b = np.array([1.0, 2.0]), np.array([1.0, 2.1])
    tu.assert_almost_equal(a, b, rtol=0.1, atol=0)
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(a, b, rtol=0.01, atol=0)
    tu.assert_almost_equal(a, b, rtol={np.dtype(np.float64): 0.1}, atol={np.dtype(np.float64): 0.0})
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(a, b, rtol={np.dtype(np.float16): 0.1}, atol=0)  # no float64 entry: default 1e-5


def test_integers_compare_exactly() -> None:
    tu.assert_almost_equal(np.arange(4), np.arange(4))
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(np.arange(4), np.arange(4) + np.array([0, 0, 0, 1]))


def test_ndarrays_and_numbers_are_accepted() -> None:
    x = mx.nd.ones((2, 2)) * 3
    tu.assert_almost_equal(x, np.full((2, 2), 3.0, np.float32))
    tu.assert_almost_equal(x, mx.nd.full((2, 2), 3.0))
    tu.assert_almost_equal(mx.nd.array([2.0]).asscalar(), 2.0)
    tu.assert_almost_equal(x, [[3, 3], [3, 3]])  # a list compares by its NumPy dtype's tolerance
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(x, np.full((2, 2), 4.0, np.float32))


def test_message_names_the_worst_element_and_the_mismatch_share() -> None:
    a = np.zeros((2, 3), np.float32)
    b = a.copy()
    b[1, 2] = 5.0
    b[0, 0] = 0.5
    with pytest.raises(AssertionError) as info:
        tu.assert_almost_equal(a, b, names=("got", "want"))
    text = str(info.value)
    assert "Location of maximum error: (1, 2), got=0.0, want=5.0" in text
    assert "2 of 6" in text
    assert "(0, 0): got=0.0, want=0.5" in text


def test_broadcasting_and_shape_checks() -> None:
    tu.assert_almost_equal(np.ones((2, 3)), np.ones(3))
    with pytest.raises(AssertionError, match="shapes"):
        tu.assert_almost_equal(np.ones((2, 3)), np.ones(3), use_broadcast=False)
    with pytest.raises(AssertionError, match="do not broadcast"):
        tu.assert_almost_equal(np.ones((2, 3)), np.ones(2))


def test_bool_arrays_must_match_exactly() -> None:
    tu.assert_almost_equal(np.array([True, False]), np.array([True, False]))
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(np.array([True, False]), np.array([True, True]))


# ---------------------------------------------------------------------------- NaN
def test_nan_fails_unless_equal_nan() -> None:
    a = np.array([1.0, np.nan])
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(a, a.copy())
    tu.assert_almost_equal(a, a.copy(), equal_nan=True)
    # NaN against a number fails even with equal_nan.
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(a, np.array([1.0, 2.0]), equal_nan=True)


def test_message_counts_nan_as_the_worst_mismatch() -> None:
    with pytest.raises(AssertionError) as info:
        tu.assert_almost_equal(np.array([1.0, np.nan, 1.0]), np.array([1.0, 1.0, 1.5]))
    assert "Location of maximum error: (1,)" in str(info.value)
    assert "2 of 3" in str(info.value)
    # With equal_nan, NaN against NaN is no mismatch: only the other element is counted.
    with pytest.raises(AssertionError) as info:
        tu.assert_almost_equal(np.array([np.nan, 1.0]), np.array([np.nan, 1.5]), equal_nan=True)
    assert "1 of 2" in str(info.value) and "Location of maximum error: (1,)" in str(info.value)


def test_assert_allclose_treats_nan_as_equal_and_is_tight() -> None:
    a = np.array([1.0, np.nan])
    tu.assert_allclose(a, a.copy())
    with pytest.raises(AssertionError):
        tu.assert_allclose(np.array([1.0]), np.array([1.0 + 1e-6]))


def test_ignore_nan_compares_only_where_neither_is_nan() -> None:
    tu.assert_almost_equal_ignore_nan(np.array([1.0, np.nan, 3.0]), np.array([1.0, 2.0, np.nan]))
    with pytest.raises(AssertionError):
        tu.assert_almost_equal_ignore_nan(np.array([1.0, np.nan, 3.0]), np.array([1.5, 2.0, np.nan]))


def test_with_err_allows_a_share_of_mismatches() -> None:
    a, b = np.zeros(10), np.zeros(10)
    b[0] = 1.0
    tu.assert_almost_equal_with_err(a, b, etol=0.2)
    with pytest.raises(AssertionError):
        tu.assert_almost_equal_with_err(a, b, etol=0.05)
    with pytest.raises(AssertionError):
        tu.assert_almost_equal_with_err(a, b)


# ---------------------------------------------------------------------------- almost_equal, same
def test_almost_equal_uses_float64_defaults_and_returns_a_bool() -> None:
    assert tu.almost_equal(np.array([1.0]), np.array([1.0 + 5e-6])) is True
    assert tu.almost_equal(np.array([1.0]), np.array([1.0 + 5e-5])) is False
    assert tu.almost_equal(np.array([1.0]), np.array([1.0 + 5e-5]), rtol=1e-4) is True
    assert tu.almost_equal(np.array([np.nan]), np.array([np.nan])) is False
    assert tu.almost_equal(np.array([np.nan]), np.array([np.nan]), equal_nan=True) is True


def test_same_is_exact_and_checks_shape() -> None:
    assert tu.same(np.arange(3), mx.nd.array([0, 1, 2]))
    assert not tu.same(np.arange(3), np.arange(3) + 1e-12)
    assert not tu.same(np.zeros((1, 3)), np.zeros(3))


def test_same_array_tells_views_from_copies() -> None:
    x = mx.nd.zeros((2, 3))
    assert not tu.same_array(x, x.copy())
    assert tu.same_array(x, x)
    np.testing.assert_array_equal(x.asnumpy(), np.zeros((2, 3)))  # left as it was


# ---------------------------------------------------------------------------- random data
@pytest.mark.parametrize("allow_zero", [False, True])
def test_rand_shapes_stay_in_range(allow_zero: bool) -> None:
    np.random.seed(3)
    low = 0 if allow_zero else 1
    seen: set[int] = set()
    for _ in range(300):
        s2 = tu.rand_shape_2d(3, 4, allow_zero_size=allow_zero)
        s3 = tu.rand_shape_3d(2, 3, 4, allow_zero_size=allow_zero)
        sn = tu.rand_shape_nd(5, dim=3, allow_zero_size=allow_zero)
        assert len(s2) == 2 and len(s3) == 3 and len(sn) == 5
        assert all(type(n) is int for n in (*s2, *s3, *sn))
        assert low <= s2[0] <= 3 and low <= s2[1] <= 4
        assert all(low <= n <= m for n, m in zip(s3, (2, 3, 4), strict=True))
        seen.update(sn)
    assert seen == set(range(low, 4))  # every size from the low end to dim is drawn


def test_random_draws_follow_numpys_seed() -> None:
    np.random.seed(7)
    first = (tu.rand_shape_nd(4), tu.random_arrays((2, 2)), tu.rand_ndarray((3, 2)).asnumpy())
    np.random.seed(7)
    again = (tu.rand_shape_nd(4), tu.random_arrays((2, 2)), tu.rand_ndarray((3, 2)).asnumpy())
    assert first[0] == again[0]
    np.testing.assert_array_equal(first[1], again[1])
    np.testing.assert_array_equal(first[2], again[2])


def test_random_arrays_are_float32_one_per_shape() -> None:
    one = tu.random_arrays((2, 3))
    assert isinstance(one, np.ndarray) and one.shape == (2, 3) and one.dtype == np.float32
    two = tu.random_arrays((1,), ())
    assert [a.shape for a in two] == [(1,), ()]
    uni = tu.random_uniform_arrays((50,), low=2.0, high=3.0)
    assert len(uni) == 1 and uni[0].min() >= 2.0 and uni[0].max() < 3.0


def test_rand_ndarray_is_a_dense_ndarray_of_the_dtype() -> None:
    x = tu.rand_ndarray((4, 5), dtype=np.float64)
    assert isinstance(x, mx.nd.NDArray)
    assert x.shape == (4, 5) and x.dtype == np.float64
    assert tu.rand_ndarray(3).shape == (3,)
    assert tu.rand_ndarray((2,)).dtype == np.float32


@pytest.mark.parametrize("stype", ["csr", "row_sparse"])
def test_sparse_storage_is_refused_by_name(stype: str) -> None:
    with pytest.raises(NotImplementedError, match="sparse"):
        tu.rand_ndarray((4, 5), stype=stype)


def test_random_sample_draws_distinct_members() -> None:
    pop = list(range(10))
    got = tu.random_sample(pop, 4)
    assert len(got) == 4 and len(set(got)) == 4 and set(got) <= set(pop)
    assert pop == list(range(10))  # the population itself is not shuffled
    with pytest.raises(ValueError):
        tu.random_sample(pop, 11)


# ---------------------------------------------------------------------------- references
@pytest.mark.parametrize(
    ("axis", "keepdims"), [(None, False), (None, True), (1, False), ((0, 2), True), ([2, 0], False), (-1, True)]
)
def test_np_reduce_matches_numpys_reduction(axis: object, keepdims: bool) -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    np_axis = tuple(axis) if isinstance(axis, list) else axis
    expected = np.sum(x, axis=np_axis, keepdims=keepdims)  # type: ignore[call-overload]
    got = tu.np_reduce(x, axis, keepdims, np.sum)
    assert np.shape(got) == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_collapse_sum_like_undoes_a_broadcast() -> None:
    a = np.ones((2, 3, 4))
    np.testing.assert_array_equal(tu.collapse_sum_like(a, (3, 1)), np.full((3, 1), 8.0))
    np.testing.assert_array_equal(tu.collapse_sum_like(a, (2, 3, 4)), a)
    with pytest.raises(ValueError):
        tu.collapse_sum_like(a, (2, 4))


# ---------------------------------------------------------------------------- exceptions, retry
def test_assert_exception_passes_only_when_the_type_is_raised() -> None:
    def boom(kind: type[BaseException], msg: str = "") -> None:
        raise kind(msg)

    tu.assert_exception(boom, ValueError, ValueError, msg="x")
    tu.assert_exception(boom, (KeyError, ValueError), KeyError)
    with pytest.raises(AssertionError, match="did not raise ValueError"):
        tu.assert_exception(lambda: None, ValueError)
    # Not even a broad type (or AssertionError itself) passes when nothing is raised.
    with pytest.raises(AssertionError):
        tu.assert_exception(lambda: None, Exception)
    with pytest.raises(TypeError):  # a different error goes through
        tu.assert_exception(boom, ValueError, TypeError)


def test_assert_exception_sees_an_operator_error_when_the_value_is_read() -> None:
    tu.assert_exception(lambda: mx.nd.ones((2, 3)).reshape((4, 4)).asnumpy(), Exception)


def test_retry_reruns_failing_assertions_only() -> None:
    calls: list[int] = []

    @tu.retry(3)
    def flaky() -> None:
        calls.append(1)
        assert len(calls) >= 3

    flaky()
    assert len(calls) == 3

    @tu.retry(2)
    def always() -> None:
        calls.append(1)
        raise AssertionError("never")

    calls.clear()
    with pytest.raises(AssertionError, match="never"):
        always()
    assert len(calls) == 2


# ---------------------------------------------------------------------------- environment
def test_environment_sets_then_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPPROF_TU_A", "old")
    monkeypatch.delenv("OPPROF_TU_B", raising=False)
    with tu.environment({"OPPROF_TU_A": "new", "OPPROF_TU_B": "set"}):
        assert os.environ["OPPROF_TU_A"] == "new" and os.environ["OPPROF_TU_B"] == "set"
    assert os.environ["OPPROF_TU_A"] == "old"
    assert "OPPROF_TU_B" not in os.environ
    with tu.environment("OPPROF_TU_A", None):
        assert "OPPROF_TU_A" not in os.environ
    assert os.environ["OPPROF_TU_A"] == "old"


def test_environment_restores_after_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPPROF_TU_C", raising=False)
    with pytest.raises(RuntimeError), tu.environment("OPPROF_TU_C", "1"):
        assert os.environ["OPPROF_TU_C"] == "1"
        raise RuntimeError
    assert "OPPROF_TU_C" not in os.environ


def test_environment_refuses_a_bad_call() -> None:
    with pytest.raises(TypeError), tu.environment("ONLY_A_NAME"):
        pass


# ---------------------------------------------------------------------------- contexts, star import
def test_default_context_is_the_cpu() -> None:
    assert tu.default_context() == mx.cpu()
    tu.set_default_context(mx.cpu(0))
    assert tu.default_context() == mx.cpu(0)
    with pytest.raises(TypeError):
        tu.set_default_context("gpu")  # type: ignore[arg-type]


def test_star_import_gives_what_mxnet_tests_use() -> None:
    ns: dict[str, object] = {}
    exec("from opprof.nd.test_utils import *", ns)
    assert ns["mx"] is mx
    assert ns["np"] is np
    for name in ("assert_almost_equal", "default_context", "rand_ndarray", "environment", "logging", "sys", "npt"):
        assert name in ns, name
    assert "check_numeric_gradient" not in ns  # the symbolic API is out of scope


def test_default_tolerance_tables() -> None:
    assert tu.default_rtols()[np.dtype(np.float16)] == 1e-2
    assert tu.default_atols()[np.dtype(np.float32)] == 1e-3
    assert tu.default_rtols()[np.dtype(np.int32)] == 0
    assert tu.default_numeric_eps()[np.dtype(np.float32)] == 2.0**-9
    assert tu.get_tols(np.float16(1), 1.0, None, None) == (1e-2, 1e-1)
