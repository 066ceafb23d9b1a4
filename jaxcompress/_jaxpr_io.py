"""A jaxpr as plain values, and the program rebuilt from them by binding its primitives.

A saved traced network keeps its program twice: compiled for running (:mod:`jax.export`,
StableHLO) and as the jaxpr it was traced to, stored by this module, for the library's second
readers of programs (the verifier's interpreter, :mod:`jaxcompress.verification`, and the
trace, :func:`jaxcompress.trace`), which read jaxprs, not StableHLO.

The document (format :data:`VERSION`, MessagePack-friendly values only) of a jaxpr is::

    {"version": 1,
     "invars": [[shape, dtype], ...],        # shape entries: ints, or "b" (a symbolic dim)
     "consts": [<array>, ...],               # the closed-over constants, by value
     "eqns": [{"p": "dot_general",           # the primitive's name
               "i": [0, 3, {"lit": <array>}],  # operands: value ids, or literals
               "o": [[shape, dtype], ...],   # the results' types (value ids follow in order)
               "a": {...}}, ...],            # the parameters, tagged values (below)
     "outvars": [7]}

Values are numbered constants first, then inputs, then every equation's results in order.
A parameter is stored as itself (``None``, a bool, int, float or string) or as a tagged
value: a tuple, list or dict of parameters; an array; a dtype; a member of an enum of
JAX (``Precision``); a named tuple or dataclass of JAX (``GatherDimensionNumbers``); a
symbolic dimension (its text, ``"b"``, evaluated again on load); a sub-jaxpr. Anything else (a
Python function, a sharding) cannot be stored and is refused by name (:class:`Unstorable`).

**Rebuilding.** :func:`rebuild` turns the document into ``fn(*args)`` that evaluates it:
each primitive is looked up by name in :mod:`jax.extend.core.primitives` (and among the
primitives with a verifier rule, :data:`jaxcompress.verification.rules.bound_rules`) and bound
again with its parameters, so tracing ``fn`` gives back the stored jaxpr equation for equation.
Calls are rebuilt as calls: a ``custom_jvp_call`` as a :func:`jax.custom_jvp` whose derivative
is the derivative of its stored body (the custom rule itself, a Python function, is not stored:
the values are the same), every other call (``jit``, ``closed_call``, ``custom_vjp_call``,
``checkpoint``) as a :func:`jax.jit` of its body. A symbolic input dimension (the batch ``b``)
takes the size of the argument's dimension, and every parameter that mentions it follows. A
``broadcast_in_dim`` or ``reshape`` whose operand has other sizes than stored (a compressed
network's smaller leaves) keeps the operand's sizes on the axes it carries over, so the widths
follow the parameters' shapes as they do in a re-run of the Python program.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import importlib
import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import export as jax_export
from jax.extend import core as ext_core

from jaxcompress.program import CALLS, jax_primitives
from jaxcompress.verification.rules import bound_rules

__all__ = ["VERSION", "Rebuilt", "Unstorable", "primitive_table", "rebuild", "to_doc"]

#: The format of a stored jaxpr (bump when what a document holds changes).
VERSION = 1

#: Modules whose enums, named tuples and dataclasses may be stored (and imported on load).
_TRUSTED = ("jax", "jaxlib")


class Unstorable(ValueError):
    """The jaxpr holds something that cannot be stored as plain values (named)."""


# -------------------------------------------------------------------------------------------
# the primitives by name


def primitive_table() -> dict[str, Any]:
    """Every primitive :func:`rebuild` can bind, by name: JAX's own
    (:mod:`jax.extend.core.primitives`) and those with a bound rule of the verifier (a user's
    registered primitive included)."""
    table = dict(jax_primitives())
    for prim in bound_rules:
        table.setdefault(prim.name, prim)
    return table


# -------------------------------------------------------------------------------------------
# writing


def _dim(d) -> int | str:
    if jax_export.is_symbolic_dim(d):
        text = str(d)
        _parse_dim(text)   # refuse now what could not be read back
        return text
    return int(d)


def _aval(aval) -> list:
    if not hasattr(aval, "shape") or not hasattr(aval, "dtype"):
        raise Unstorable(f"a value of type {type(aval).__name__} (not an array)")
    if jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended):
        raise Unstorable(f"a value of dtype {aval.dtype}")
    return [[_dim(d) for d in aval.shape], jnp.dtype(aval.dtype).name]


def _array(value) -> dict:
    arr = np.asarray(value)
    if arr.dtype == object or jax.dtypes.issubdtype(arr.dtype, jax.dtypes.extended):
        raise Unstorable(f"an array of dtype {arr.dtype}")
    return {"t": "array", "dtype": arr.dtype.name, "shape": list(arr.shape),
            "data": np.ascontiguousarray(arr).tobytes()}


def _class_name(cls: type) -> str:
    module = cls.__module__ or ""
    if module.split(".")[0] not in _TRUSTED:
        raise Unstorable(f"a {cls.__qualname__} from module {module!r}")
    return f"{module}:{cls.__qualname__}"


def _param(value, where: str):
    """One parameter as plain (tagged) values."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return {"t": "enum", "cls": _class_name(type(value)), "v": value.name}
    if isinstance(value, (int, float)) and type(value) in (int, float):
        return value
    if jax_export.is_symbolic_dim(value):
        return {"t": "dim", "v": _dim(value)}
    if isinstance(value, ext_core.ClosedJaxpr):
        return {"t": "closed_jaxpr", "v": _jaxpr_doc(value.jaxpr, value.consts)}
    if isinstance(value, ext_core.Jaxpr):
        return {"t": "jaxpr", "v": _jaxpr_doc(value, ())}
    if isinstance(value, (np.dtype, type)) and not isinstance(value, type(enum.Enum)):
        try:
            return {"t": "dtype", "v": jnp.dtype(value).name}
        except TypeError:
            raise Unstorable(f"{where}: the type {value!r}") from None
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        return _array(value)
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        return {"t": "named", "cls": _class_name(type(value)),
                "v": [_param(v, where) for v in value]}
    if isinstance(value, (tuple, list)):
        return {"t": type(value).__name__, "v": [_param(v, where) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"t": "dict", "v": {k: _param(v, where) for k, v in value.items()}}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"t": "dataclass", "cls": _class_name(type(value)),
                "v": {f.name: _param(getattr(value, f.name), where)
                      for f in dataclasses.fields(value)}}
    raise Unstorable(f"{where}: a parameter of type {type(value).__qualname__} ({value!r:.80})")


def _jaxpr_doc(jaxpr, consts) -> dict:
    ids: dict = {}

    def new(v):
        ids[v] = len(ids)

    def ref(v):
        if isinstance(v, ext_core.Literal):
            return {"lit": _array(v.val)}
        return ids[v]

    for v in jaxpr.constvars:
        new(v)
    for v in jaxpr.invars:
        new(v)
    table = primitive_table()
    eqns = []
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        where = f"primitive {name!r}"
        if name in CALLS:
            sub = eqn.params[CALLS[name]]
            inner = (_jaxpr_doc(sub.jaxpr, sub.consts) if isinstance(sub, ext_core.ClosedJaxpr)
                     else _jaxpr_doc(sub, ()))
            label = eqn.params.get("name") or getattr(
                getattr(getattr(sub, "jaxpr", sub), "debug_info", None), "func_name", None)
            params = {"call": inner, "name": str(label or name)}
        else:
            if table.get(name) is not eqn.primitive:
                raise Unstorable(f"{where} is not one of JAX's primitives (jax.extend.core."
                                 "primitives) nor registered with the verifier "
                                 "(jaxcompress.verification.register_rule), so it could not "
                                 "be found again by its name")
            params = {k: _param(v, f"{where}, parameter {k!r}") for k, v in eqn.params.items()}
        record = {"p": name, "i": [ref(v) for v in eqn.invars],
                  "o": [_aval(v.aval) for v in eqn.outvars], "a": params}
        if name in ("broadcast_in_dim", "reshape"):   # what _follow compares with
            record["s"] = _aval(eqn.invars[0].aval)[0]
        eqns.append(record)
        for v in eqn.outvars:
            new(v)
    return {"invars": [_aval(v.aval) for v in jaxpr.invars],
            "consts": [_array(c) for c in consts],
            "eqns": eqns, "outvars": [ref(v) for v in jaxpr.outvars]}


def to_doc(closed) -> dict:
    """The document of a :class:`jax.extend.core.ClosedJaxpr` (see the module docstring).

    Raises:
      Unstorable: a primitive that cannot be found again by name, or a parameter that is not a
        plain value (named, with its primitive).
    """
    return {"version": VERSION, **_jaxpr_doc(closed.jaxpr, closed.consts)}


# -------------------------------------------------------------------------------------------
# reading


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CALLS_OF_DIMS = {"max": lambda a, b: a if a >= b else b, "min": lambda a, b: a if a <= b else b,
                  "floordiv": operator.floordiv, "mod": operator.mod}


@functools.lru_cache(maxsize=256)
def _parse_dim(text: str) -> ast.expr:
    """The expression of a symbolic dimension (integers, names, ``+ - * // %``, ``max``,
    ``min``, ``floordiv``, ``mod``: what :mod:`jax.export` prints)."""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise Unstorable(f"the symbolic dimension {text!r} cannot be read back") from None
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, ast.USub, ast.Call,
                               *_BINOPS)) or (isinstance(node, ast.Constant)
                                              and type(node.value) is int)
        if isinstance(node, ast.Call):
            ok = isinstance(node.func, ast.Name) and node.func.id in _CALLS_OF_DIMS
        if not ok:
            raise Unstorable(f"the symbolic dimension {text!r} cannot be read back")
    return tree


def _eval_dim(value, env: dict):
    if isinstance(value, int):
        return value
    def ev(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ValueError(f"the stored program's dimension {value!r} names {node.id!r}, "
                                 "which no input dimension gives")
            return env[node.id]
        if isinstance(node, ast.UnaryOp):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp):
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        return _CALLS_OF_DIMS[node.func.id](*[ev(a) for a in node.args])
    return ev(_parse_dim(value))


@functools.lru_cache(maxsize=64)
def _import_class(name: str) -> type:
    module, _, qual = name.partition(":")
    if module.split(".")[0] not in _TRUSTED:
        raise ValueError(f"the stored program names a class of module {module!r}")
    try:
        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        raise ValueError(f"the stored program names {qual} of {module}, which this jax "
                         f"({jax.__version__}) does not have") from None
    return obj


def _read_array(doc) -> np.ndarray:
    dtype = jnp.dtype(doc["dtype"])
    return np.frombuffer(doc["data"], dtype=dtype).reshape([int(s) for s in doc["shape"]]).copy()


def _read_param(value, env: dict):
    if not isinstance(value, dict):
        return value
    tag = value["t"]
    if tag == "array":
        return _read_array(value)
    if tag == "dim":
        return _eval_dim(value["v"], env)
    if tag == "tuple":
        return tuple(_read_param(v, env) for v in value["v"])
    if tag == "list":
        return [_read_param(v, env) for v in value["v"]]
    if tag == "dict":
        return {k: _read_param(v, env) for k, v in value["v"].items()}
    if tag == "dtype":
        return jnp.dtype(value["v"])
    if tag == "enum":
        return _import_class(value["cls"])[value["v"]]
    if tag == "named":
        return _import_class(value["cls"])(*[_read_param(v, env) for v in value["v"]])
    if tag == "dataclass":
        return _import_class(value["cls"])(**{k: _read_param(v, env)
                                             for k, v in value["v"].items()})
    if tag in ("closed_jaxpr", "jaxpr"):
        closed = _sub_jaxpr(value["v"], env)
        return closed if tag == "closed_jaxpr" else closed.jaxpr
    raise ValueError(f"the stored program has a parameter of unknown kind {tag!r}")


def _specs(doc: dict, env: dict) -> list[jax.ShapeDtypeStruct]:
    return [jax.ShapeDtypeStruct(tuple(_eval_dim(d, env) for d in shape), jnp.dtype(dtype))
            for shape, dtype in doc["invars"]]


def _sub_jaxpr(doc: dict, env: dict):
    """The closed jaxpr of a stored sub-program (a loop's body), traced again."""
    if doc["consts"]:   # a closed sub-jaxpr's constants stay its own
        consts = [_read_array(c) for c in doc["consts"]]
        fn = functools.partial(_evaluate, doc, consts, env=env)
    else:
        fn = functools.partial(_evaluate, doc, [], env=env)
    return jax.make_jaxpr(lambda *a: fn(*a))(*_specs(doc, env))


def _follow(eqn: dict, args: list, params: dict, env: dict) -> dict:
    """``broadcast_in_dim`` / ``reshape`` parameters at the operand's actual sizes (the widths
    follow the parameters' shapes; see the module docstring)."""
    name = eqn["p"]
    if name not in ("broadcast_in_dim", "reshape") or not eqn["i"]:
        return params
    op = args[0]
    stored = eqn.get("s")
    if stored is None:
        return params
    stored = [_eval_dim(d, env) for d in stored]
    now = list(np.shape(op))
    if now == stored or len(now) != len(stored):
        return params
    out = [_eval_dim(d, env) for d in eqn["o"][0][0]]
    if name == "broadcast_in_dim":
        shape = list(params["shape"])
        for i, j in enumerate(params["broadcast_dimensions"]):
            if stored[i] == out[j]:      # an axis carried over, not a 1 broadcast
                shape[j] = now[i]
        return {**params, "shape": tuple(shape)}
    if params.get("dimensions") is not None:
        return params
    # a reshape that only adds or removes axes of size 1: each other axis keeps its size
    big_in = [i for i, s in enumerate(stored) if s != 1]
    big_out = [j for j, s in enumerate(out) if s != 1]
    if [stored[i] for i in big_in] != [out[j] for j in big_out]:
        return params
    sizes = list(params["new_sizes"])
    for i, j in zip(big_in, big_out, strict=True):
        sizes[j] = now[i]
    return {**params, "new_sizes": tuple(sizes)}


def _call(eqn: dict, args: list, env: dict) -> list:
    inner = eqn["a"]["call"]
    consts = [_read_array(c) for c in inner["consts"]]

    def body(*a):
        return _evaluate(inner, consts, *a, env=env)

    body.__name__ = body.__qualname__ = str(eqn["a"].get("name") or eqn["p"])
    if eqn["p"] == "custom_jvp_call":
        fn = jax.custom_jvp(body)
        fn.defjvp(lambda primals, tangents: jax.jvp(body, primals, tangents))
    else:
        fn = jax.jit(body)
    return list(fn(*args))


def _evaluate(doc: dict, consts: list, *args, env: dict) -> list:
    """The stored program on ``args`` (concrete, traced or abstract)."""
    table = primitive_table()
    vals: list = list(consts) + list(args)
    for eqn in doc["eqns"]:
        ins = [_read_array(v["lit"]) if isinstance(v, dict) else vals[v] for v in eqn["i"]]
        if eqn["p"] in CALLS:
            outs = _call(eqn, ins, env)
        else:
            prim = table.get(eqn["p"])
            if prim is None:
                raise ValueError(f"the stored program uses primitive {eqn['p']!r}, which this "
                                 f"jax ({jax.__version__}) does not have")
            params = {k: _read_param(v, env) for k, v in eqn["a"].items()}
            params = _follow(eqn, ins, params, env)
            res = prim.bind(*ins, **params)
            outs = list(res) if prim.multiple_results else [res]
        vals.extend(outs)
    return [vals[v] if not isinstance(v, dict) else _read_array(v["lit"])
            for v in doc["outvars"]]


@dataclasses.dataclass(frozen=True, eq=False)
class Rebuilt:
    """A stored program as a function ``fn(*args) -> list of outputs``.

    Attributes:
      doc: the document (:func:`to_doc`).
      consts: its constants, as arrays.
    """

    doc: dict = dataclasses.field(repr=False)
    consts: tuple = dataclasses.field(repr=False)

    @property
    def in_specs(self) -> list[tuple[tuple, str]]:
        """The stored inputs' ``(shape, dtype)`` (a symbolic dimension as its text)."""
        return [(tuple(shape), dtype) for shape, dtype in self.doc["invars"]]

    def __call__(self, *args) -> list:
        stored = self.doc["invars"]
        if len(args) != len(stored):
            raise TypeError(f"the stored program takes {len(stored)} inputs, got {len(args)}")
        env: dict = {}
        for k, (a, (shape, dtype)) in enumerate(zip(args, stored, strict=True)):
            have = np.shape(a)
            if len(have) != len(shape):
                raise TypeError(f"input {k} of the stored program has shape {tuple(shape)}, "
                                f"got an array of shape {have}")
            if jnp.result_type(a) != jnp.dtype(dtype):
                raise TypeError(f"input {k} of the stored program has dtype {dtype}, got "
                                f"{jnp.result_type(a)}")
            for d, n in zip(shape, have, strict=True):
                if isinstance(d, str) and d.isidentifier():
                    if env.setdefault(d, n) != n:
                        raise TypeError(f"the stored program's dimension {d!r} is "
                                        f"{env[d]} and {n} in its inputs")
        return _evaluate(self.doc, list(self.consts), *args, env=env)


def rebuild(doc: dict) -> Rebuilt:
    """The program of a document from :func:`to_doc`, ready to call (see the module docstring).

    Raises:
      ValueError: a document of another format version, or one naming a primitive this JAX
        does not have.
    """
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        got = doc.get("version") if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"the stored program has format version {got!r}; this jaxcompress "
                         f"reads version {VERSION}")
    table = primitive_table()

    def check(d):
        for eqn in d["eqns"]:
            if eqn["p"] in CALLS:
                check(eqn["a"]["call"])
            elif eqn["p"] not in table:
                raise ValueError(f"the stored program uses primitive {eqn['p']!r}, which this "
                                 f"jax ({jax.__version__}) does not have")
            else:
                check_params(eqn["a"])

    def check_params(value):   # every class a parameter names exists in this jax
        if isinstance(value, dict):
            if value.get("t") in ("enum", "named", "dataclass"):
                _import_class(value["cls"])
            if value.get("t") in ("closed_jaxpr", "jaxpr"):
                check(value["v"])
                return
            for v in value.values():
                check_params(v)
        elif isinstance(value, list):
            for v in value:
                check_params(v)
    check(doc)
    return Rebuilt(doc, tuple(_read_array(c) for c in doc["consts"]))
