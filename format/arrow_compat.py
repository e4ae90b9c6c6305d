"""What Tessera needs from pyarrow that its lowest supported release lacks, in one place.

Tessera supports pyarrow from the floor ``pyproject.toml`` declares (16) to the
newest.  A feature newer than the floor is used through this module only,
chosen by what the running pyarrow has (never by its version number), and
the fallback gives the same answer, the same result type and the same
errors.  ``tests/test_pyarrow_floor.py`` runs Tessera's tests on the floor.

* :func:`remainder_checked_for` — SQL ``%`` (``pc.remainder_checked``, new in
  pyarrow 26): the remainder of truncated division (its sign is the
  dividend's, as C's ``%`` and ``fmod``), an error on a zero divisor or on
  an integer overflow (``INT_MIN % -1``), operands promoted as pyarrow's
  arithmetic promotes them.  Without it: integers as ``a - (a / b) * b``
  (pyarrow's checked integer division truncates), floats and decimals by a
  scalar function registered with pyarrow's function registry once per
  process (``tessera_remainder_<type>``: NumPy's ``fmod``, Python's
  ``decimal``), usable in Expressions, Acero plans and dataset filters.
* :func:`numpy_dtype` — the NumPy dtype of a fixed-width type.
  ``DataType.to_pandas_dtype()`` imports pandas (not a dependency of Tessera)
  before pyarrow 26.
* :class:`SchemaKey` — a schema as a cache key.  Before pyarrow 22 a schema
  with metadata cannot be hashed.

Older APIs that every supported release has are used directly instead (e.g.
``StructType.get_field_index``, not ``StructType.names``, new in 17 or 18).
See docs/reference/pyarrow-floor.md.
"""

from __future__ import annotations

import decimal
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: pyarrow >= 26 computes SQL's ``%`` itself
HAS_REMAINDER_CHECKED = hasattr(pc, "remainder_checked")

_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}  # decimal digits of the widest signed value (unsigned: see below)
_UDF_LOCK = threading.Lock()
_UDFS: set[str] = set()


def numpy_dtype(t: pa.DataType) -> np.dtype:
    """The NumPy dtype of the fixed-width type ``t`` (an integer, a float), without pandas."""
    return pa.array([], t).to_numpy(zero_copy_only=False).dtype


class SchemaKey:
    """``schema`` as a dict or cache key: hashable on every pyarrow, equal to
    another key when the two schemas are equal, metadata included."""

    __slots__ = ("_hash", "schema")

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        try:
            self._hash = hash(schema)
        except TypeError:  # pyarrow < 22: the metadata dict is not hashable
            self._hash = hash(schema.to_string(show_field_metadata=True, show_schema_metadata=True))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SchemaKey) and self.schema.equals(other.schema, check_metadata=True)


def _no_kernel(a: pa.DataType, b: pa.DataType) -> pa.ArrowNotImplementedError:
    return pa.ArrowNotImplementedError(f"Function 'remainder_checked' has no kernel matching input types ({a}, {b})")


def _as_decimal(t: pa.DataType) -> pa.DataType:
    """An integer type as the decimal type holding all its values (pyarrow's promotion)."""
    if not pa.types.is_integer(t):
        return t
    digits = _INT_DIGITS[t.bit_width] + (1 if pa.types.is_unsigned_integer(t) and t.bit_width == 64 else 0)
    return pa.decimal128(digits, 0)


def _decimal_result(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """pyarrow 26's type of ``a % b`` for decimal operands: both rescaled to the
    larger scale, the larger precision."""
    a, b = _as_decimal(a), _as_decimal(b)
    scale = max(a.scale, b.scale)
    precision = max(a.precision + scale - a.scale, b.precision + scale - b.scale)
    wide = pa.types.is_decimal256(a) or pa.types.is_decimal256(b)
    limit = 76 if wide else 38
    if precision > limit:
        raise pa.ArrowInvalid(f"Decimal precision out of range [1, {limit}]: {precision}")
    return pa.decimal256(precision, scale) if wide else pa.decimal128(precision, scale)


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_decimal(t) or t in (pa.float32(), pa.float64())


def _result_type(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The type pyarrow 26's ``remainder_checked`` gives operands of types ``a`` and ``b``."""
    if pa.types.is_null(a) or pa.types.is_null(b):
        other = b if pa.types.is_null(a) else a
        if not (pa.types.is_null(other) or _numeric(other)):
            raise _no_kernel(a, b)
        return other
    if not (_numeric(a) and _numeric(b)):
        raise _no_kernel(a, b)
    if pa.types.is_decimal(a) or pa.types.is_decimal(b):
        if pa.types.is_floating(a) or pa.types.is_floating(b):
            return pa.float64()
        return _decimal_result(a, b)
    return pc.add_checked(pa.array([], a), pa.array([], b)).type  # pyarrow's arithmetic promotion


def _numpy(x: pa.Array | pa.Scalar, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, validity) of an argument of a scalar function, a scalar repeated ``n`` times."""
    if isinstance(x, pa.Scalar):
        if not x.is_valid:
            return np.zeros(n), np.zeros(n, dtype=bool)
        return np.full(n, x.as_py()), np.ones(n, dtype=bool)
    return x.to_numpy(zero_copy_only=False), np.asarray(x.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _float_kernel(out_type: pa.DataType) -> Callable[..., pa.Array]:
    dtype = numpy_dtype(out_type)

    def kernel(ctx: Any, a: pa.Array | pa.Scalar, b: pa.Array | pa.Scalar) -> pa.Array:
        n = ctx.batch_length
        (av, am), (bv, bm) = _numpy(a, n), _numpy(b, n)
        valid = am & bm
        av, bv = av.astype(dtype, copy=False), bv.astype(dtype, copy=False)
        if np.any(valid & (bv == 0)):
            raise pa.ArrowInvalid("divide by zero")
        with np.errstate(all="ignore"):
            out = np.fmod(av, bv)
        return pa.array(out, type=out_type, mask=~valid)

    return kernel


def _decimal_kernel(out_type: pa.DataType) -> Callable[..., pa.Array]:
    def kernel(ctx: Any, a: pa.Array | pa.Scalar, b: pa.Array | pa.Scalar) -> pa.Array:
        n = ctx.batch_length
        av = a.to_pylist() if isinstance(a, pa.Array) else [a.as_py()] * n
        bv = b.to_pylist() if isinstance(b, pa.Array) else [b.as_py()] * n
        out: list[decimal.Decimal | None] = []
        with decimal.localcontext() as ctx_dec:
            ctx_dec.prec = 100  # more digits than any decimal256: every remainder is exact
            for x, y in zip(av, bv):
                if x is None or y is None:
                    out.append(None)
                elif y == 0:
                    raise pa.ArrowInvalid("divide by zero")
                else:
                    out.append(x % y)  # Decimal's %: the sign of the dividend
        return pa.array(out, type=out_type)

    return kernel


def _udf(out_type: pa.DataType) -> str:
    """The name of the registered remainder function over two ``out_type`` operands."""
    name = "tessera_remainder_" + "".join(c if c.isalnum() else "_" for c in str(out_type)).strip("_")
    with _UDF_LOCK:
        if name not in _UDFS:
            kernel = _decimal_kernel(out_type) if pa.types.is_decimal(out_type) else _float_kernel(out_type)
            doc = {"summary": "SQL % (truncated remainder)", "description": "pyarrow 26's remainder_checked"}
            try:
                pc.register_scalar_function(kernel, name, doc, {"dividend": out_type, "divisor": out_type}, out_type)
            except pa.ArrowKeyError:
                pass  # registered already (the registry is per process)
            _UDFS.add(name)
    return name


def _is_expr(x: Any) -> bool:
    return isinstance(x, pc.Expression)


def remainder_checked_for(types: Callable[[], tuple[pa.DataType, pa.DataType]]) -> Callable[[Any, Any], Any]:
    """A function computing ``pc.remainder_checked(a, b)`` (pyarrow 26) for
    operands of the two types ``types()`` returns (called only when pyarrow
    lacks the kernel: binding an Expression to learn its type costs): two
    Expressions, or two arrays or scalars.  Raises
    ``pa.ArrowNotImplementedError`` for types pyarrow 26 has no kernel for
    (as it does)."""
    if HAS_REMAINDER_CHECKED:
        return pc.remainder_checked
    return remainder_fallback_for(*types())


def remainder_fallback_for(a_type: pa.DataType, b_type: pa.DataType) -> Callable[[Any, Any], Any]:
    """:func:`remainder_checked_for` without pyarrow's own kernel (what runs on
    pyarrow < 26; tests compare it with the kernel where there is one)."""
    out = _result_type(a_type, b_type)
    if pa.types.is_null(out):
        return lambda a, b: pc.scalar(pa.scalar(None)) if _is_expr(a) or _is_expr(b) else pa.scalar(None)
    if pa.types.is_integer(out):
        # truncating division: a - (a / b) * b is the remainder, with the same errors
        return lambda a, b: pc.subtract_checked(a, pc.multiply_checked(pc.divide_checked(a, b), b))
    name = _udf(out)

    def remainder(a: Any, b: Any) -> Any:
        if _is_expr(a) or _is_expr(b):
            a, b = (x if _is_expr(x) else pc.scalar(x) for x in (a, b))
            return pc.Expression._call(name, [a.cast(out, safe=False), b.cast(out, safe=False)])
        return pc.call_function(name, [pc.cast(a, out, safe=False), pc.cast(b, out, safe=False)])

    return remainder


__all__ = ["HAS_REMAINDER_CHECKED", "SchemaKey", "numpy_dtype", "remainder_checked_for", "remainder_fallback_for"]
