"""Examples that cannot drift: README.md's and the docs' code, the docstrings' doctests, the site.

**Code blocks.** Every ```` ```python ```` block of ``README.md`` and of the hand-written pages
``docs/*.md`` is executed, each in a fresh namespace in a temporary working directory (so the
blocks are independent of each other and of where pytest runs). A top-level expression whose
line ends in a comment that starts with a Python literal is checked against it::

    print(jc.layer_sizes(small))        # [2, 45, 45, 45, 45, 2]
    report.layers[0].k_cert             # 18
    res.history[0]                      # 'a priori orders: ours ...'   ("..." matches anything)
    jc.sup_error(...)                   # 2.6e-09   (floats: within one unit of the last digit)

Text after the literal that starts with a bracket, a colon, a comparison or the like is prose
(``# 4.9e-07 <= eps: a proof``, ``# (3, 1): your fn``); a comment that does not start with a
literal is not checked. A ``print`` of several values (or one whose comment is not one literal)
is checked against the text it printed, and so is a print followed by comment lines that show
its output::

    print(jc.layer_sizes(small), jc.num_params(small))  # [2, 28, 28, 1] 981
    print(jc.layer_sizes(small), flag)
    # [2, 21, 21, 1] True

The printed text and the comment are compared token by token (runs of whitespace are one
space): text exactly, integers exactly, a number written with a decimal point or an exponent
within one unit of its last digit shown, ``...`` any text. A comment that shows a value (it
starts with a digit, a bracket, a quote, ``True``, ``False`` or ``None``) on a line the checker
cannot check (not a top-level expression or print, or a literal it cannot read) fails the block:
no printed value in the docs goes unchecked (``test_every_shown_value_is_checked`` finds them
without running anything).

HTML comments right before a block (invisible on GitHub and in the docs) adjust its run:

* ``<!-- test: setup: CODE -->`` runs CODE first (names the block uses without defining them);
* ``<!-- test: shrink "OLD" -> "NEW" -->`` replaces OLD by NEW in the default run, for blocks
  that take minutes as written (the full ``[2, 1024 x 4, 2]`` network); its outputs are still
  checked, so a shrink must keep them, and ``-m slow`` runs the block as written;
* ``<!-- test: slow: REASON -->`` runs the block only with ``-m slow``;
* ``<!-- test: skip: REASON -->`` never runs it (a call's shape, not a program).

**Shell blocks.** Every ```` ```bash ```` block of the same pages (but the README's opening
install commands) runs as shown in a fresh folder, after the Python blocks above it that make the
files it reads (those of its own section, or of the page when its section has none): each line
must be a ``jaxcompress`` command that exits with status 0, and a file it writes with ``-o``
must load. A block of other commands is marked ``skip``.

**Doctests.** The ``>>>`` examples in the docstrings of every ``jaxcompress`` module run with
``ELLIPSIS`` and ``NORMALIZE_WHITESPACE``; ``jax``, ``jnp``, ``np`` and ``jc`` are predefined
(the convention the API reference states). An example that takes long is marked
``# doctest: +SKIP``.

**The site.** Every name in ``jaxcompress.__all__`` and ``jaxcompress.flax.__all__`` gets an API
page with a docstring, every README section a guide page, every hand-written page of ``docs/`` a
place in the toctree, every notebook a page (checked from ``docs/_ext/jaxcompress_docs.py``
without building); the links of the README and of the hand-written pages point at files and
headings that exist; ``-m slow`` builds the site with ``-W`` and checks that its mathematics is
typeset by the MathJax shipped with the site, not one from a CDN.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import doctest
import functools
import importlib
import importlib.util
import io
import pathlib
import re
import shlex
import sys
import tokenize
import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress import cli

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


@functools.cache
def _docs_module():
    """``docs/_ext/jaxcompress_docs.py``, the generator of the guide and API pages."""
    name = "jaxcompress_docs"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, DOCS / "_ext" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses look their module up there
        spec.loader.exec_module(mod)
    return sys.modules[name]


# ------------------------------------------------------------------------------------------------
# Code blocks of README.md and docs/*.md
# ------------------------------------------------------------------------------------------------

_MARKER = re.compile(r"<!--\s*test:\s*(.*?)-->", re.S)
_SHRINK = re.compile(r'shrink\s+"(.*?)"\s*->\s*"(.*?)"', re.S)


@dataclasses.dataclass(frozen=True)
class Block:
    path: pathlib.Path
    line: int  # of the opening fence
    section: str
    code: str
    setup: str = ""
    shrink: tuple[tuple[str, str], ...] = ()
    slow: str = ""
    skip: str = ""

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.section.lower()).strip("-") or "top"
        return f"{self.path.relative_to(ROOT)}:{self.line}:{slug}"


def code_blocks(path: pathlib.Path, lang: str = "python") -> list[Block]:
    """The ```python (or ```LANG) blocks of a markdown file with their markers."""
    lines = path.read_text().splitlines()
    blocks, section, pending, i = [], "", [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#") and not line.startswith("#!"):
            section = line.lstrip("#").strip()
        if line.startswith("<!--"):
            j = i
            while "-->" not in lines[j]:
                j += 1
            pending.append("\n".join(lines[i:j + 1]))
            i = j + 1
            continue
        if line.startswith("```"):
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            if line.strip() == f"```{lang}":
                kw: dict = {"setup": "", "shrink": [], "slow": "", "skip": ""}
                for comment in pending:
                    for m in _MARKER.finditer(comment):
                        body = m.group(1).strip()
                        kind, _, rest = body.partition(":")
                        if body.startswith("shrink"):
                            kw["shrink"] += _SHRINK.findall(body)
                        elif kind.strip() in ("setup", "slow", "skip"):
                            kw[kind.strip()] = rest.strip() or kind.strip()
                        else:
                            raise ValueError(f"{path}:{i + 1}: unknown test marker {body!r}")
                blocks.append(Block(path, i + 1, section, "\n".join(lines[i + 1:j]) + "\n",
                                    kw["setup"], tuple(kw["shrink"]), kw["slow"], kw["skip"]))
            pending, i = [], j + 1
            continue
        if line.strip():
            pending = []
        i += 1
    return blocks


def _matcher(node: ast.AST, src: str):
    """A predicate for the literal ``node`` (its text in ``src``) and a description."""
    text = ast.get_source_segment(src, node)
    if isinstance(node, (ast.Tuple, ast.List)):
        subs = [_matcher(e, src) for e in node.elts]

        def seq(actual):
            if isinstance(actual, (jax.Array, np.ndarray)):
                actual = np.asarray(actual).tolist()
            return (isinstance(actual, (tuple, list)) and len(actual) == len(subs)
                    and all(f(a) for f, a in zip(subs, actual, strict=True)))
        return seq
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        sign, node = -1, node.operand
    if not isinstance(node, ast.Constant):
        raise SyntaxError(f"not a literal: {text}")
    value = node.value
    if isinstance(value, str):
        pattern = re.compile(".*".join(re.escape(p) for p in value.split("...")), re.S)
        return lambda actual: isinstance(actual, str) and pattern.fullmatch(actual) is not None
    if value is None or isinstance(value, bool):
        return lambda actual: actual is value or actual == value
    if isinstance(value, int):
        return lambda actual: _scalar(actual) == sign * value
    if isinstance(value, float):
        mantissa = re.split(r"[eE]", text.lstrip("-"))[0]
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        exponent = int(re.split(r"[eE]", text)[1]) if re.search(r"[eE]", text) else 0
        unit = 10.0 ** (exponent - decimals)  # one unit in the last digit shown
        return lambda actual: abs(_scalar(actual) - sign * value) <= unit * (1 + 1e-9)
    raise SyntaxError(f"unsupported literal: {text}")


def _scalar(actual):
    arr = np.asarray(actual)
    if arr.size != 1:
        raise AssertionError(f"expected a scalar, got shape {arr.shape}")
    return arr.item()


def expected_output(comment: str):
    """``(predicate, literal text)`` if the comment starts with a literal, else ``None``."""
    text = comment.lstrip("#").strip()
    # the literal ends at a space or right before prose glued to it ("(3, 1): your fn")
    cuts = sorted({len(text)} | {m.start() for m in re.finditer(r"[\s:;]", text)}, reverse=True)
    for cut in cuts:
        head, rest = text[:cut].strip(), text[cut:].strip()
        if not head or (rest and (rest[0].isalnum() or rest[0] in "_.")):
            continue
        try:
            tree = ast.parse(head, mode="eval")
            return _matcher(tree.body, head), head
        except SyntaxError:
            continue
    return None


#: A comment that shows a value: it starts with a number, a bracket, a quote or a constant.
_SHOWS_VALUE = re.compile(r"""^#\s*(-?\.?\d|[\[({'"]|(True|False|None)\b)""")
#: A number in printed text: an integer, or a float with a decimal point and/or an exponent.
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"


def shows_value(comment: str) -> bool:
    return _SHOWS_VALUE.match(comment.strip()) is not None


def printed_matches(shown: str, printed: str) -> bool:
    """Whether ``printed`` (what a print wrote) reads as ``shown`` (the text a comment shows):
    token by token, whitespace runs as one space, text exactly, integers exactly, other
    numbers within one unit of their last digit shown, ``...`` any text."""
    def norm(t):
        return " ".join(t.split())

    shown, printed = norm(shown), norm(printed)
    pattern, wanted = [], []
    for i, part in enumerate(shown.split("...")):
        if i:
            pattern.append(".*?")
        pos = 0
        for m in re.finditer(_NUMBER, part):
            pattern.append(re.escape(part[pos:m.start()]).replace(r"\ ", " "))
            pattern.append(f"({_NUMBER})")
            wanted.append(m.group())
            pos = m.end()
        pattern.append(re.escape(part[pos:]).replace(r"\ ", " "))
    m = re.fullmatch("".join(pattern), printed, re.S)
    if m is None:
        return False
    for text, got in zip(wanted, m.groups(), strict=True):
        if not re.search(r"[.eE]|nan|inf", text):
            if not re.fullmatch(r"[-+]?\d+", got) or int(got) != int(text):
                return False
            continue
        mantissa = re.split(r"[eE]", text.lstrip("+-"))[0]
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        exponent = int(re.split(r"[eE]", text)[1]) if re.search(r"[eE]", text) else 0
        unit = 10.0 ** (exponent - decimals)
        a, b = float(got), float(text)
        if not (a == b or abs(a - b) <= unit * (1 + 1e-9)):
            return False
    return True


@dataclasses.dataclass(frozen=True)
class Check:
    """How one top-level statement's output is checked: by ``value`` (the expression's value
    against the literal of its comment) or by ``printed`` text (what a ``print`` wrote against
    the comment's text, or the comment lines below it)."""

    kind: str  # "value" or "printed"
    shown: str
    predicate: Any = None


def _is_print(node: ast.AST) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name) and node.value.func.id == "print")


def plan_checks(code: str) -> tuple[dict[int, Check], list[str]]:
    """``({statement index: Check}, problems)`` for a block: every comment that shows a value
    is either checked or a problem (its line and why)."""
    tree = ast.parse(code)
    comments = _comments(code)
    lines = code.splitlines()
    checks: dict[int, Check] = {}
    used: set[int] = set()
    for i, stmt in enumerate(tree.body):
        comment = comments.get(stmt.end_lineno)
        inline = comment if comment and lines[stmt.end_lineno - 1].split("#")[0].strip() else None
        below, n = [], stmt.end_lineno + 1
        while n <= len(lines) and lines[n - 1].strip().startswith("#") and shows_value(
                lines[n - 1]):
            below.append(lines[n - 1].strip()[1:].strip())
            n += 1
        if not isinstance(stmt, ast.Expr):
            continue
        one_arg = not _is_print(stmt) or (len(stmt.value.args) == 1 and not stmt.value.keywords)
        literal = expected_output(inline) if inline and one_arg else None
        if literal is not None:
            checks[i] = Check("value", literal[1], literal[0])
            used.add(stmt.end_lineno)
        elif _is_print(stmt) and (below or (inline and shows_value(inline))):
            shown = "\n".join(below) if below else inline.lstrip("#").strip()
            checks[i] = Check("printed", shown)
            used.update(range(stmt.end_lineno, stmt.end_lineno + len(below) + 1))
    problems = [f"line {ln}: {lines[ln - 1].strip()}" for ln, c in sorted(comments.items())
                if shows_value(c) and ln not in used and _on_expression_or_alone(tree, lines, ln)]
    return checks, problems


def _on_expression_or_alone(tree: ast.Module, lines: list[str], ln: int) -> bool:
    """Whether line ``ln``'s comment is where a printed value would be shown: alone on its
    line, or ending an expression statement (at any depth); a comment on an assignment or an
    ``assert`` describes the code, it is not output."""
    if not lines[ln - 1].split("#")[0].strip():
        return True
    return any(isinstance(node, ast.Expr) and node.end_lineno == ln
               for node in ast.walk(tree))


def _comments(code: str) -> dict[int, str]:
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string
    return out


def run_block(code: str, setup: str, name: str) -> None:
    """Execute ``code`` statement by statement, checking the outputs its comments show."""
    module = types.ModuleType("__docs_example__")  # a real module: dataclasses look it up
    sys.modules[module.__name__] = module
    try:
        # a reader runs the examples with JAX's default dtype and rank promotion (the test
        # suite is strict, conftest.py), e.g. float64 points into a float32 Flax model, or
        # x @ w + b with a 1-D bias
        with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
            _run_in(module.__dict__, code, setup, name)
    finally:
        del sys.modules[module.__name__]


def _run_in(ns: dict, code: str, setup: str, name: str) -> None:
    if setup:
        exec(compile(setup, f"{name} (setup)", "exec"), ns)
    tree = ast.parse(code)
    checks, problems = plan_checks(code)
    assert not problems, (f"{name}: comments that show a value the test cannot check (see "
                          "tests/test_docs.py's docstring): " + "; ".join(problems))
    for i, stmt in enumerate(tree.body):
        check = checks.get(i)
        if check is None:
            exec(compile(ast.Module([stmt], []), name, "exec"), ns)
            continue
        if check.kind == "printed":
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(ast.Module([stmt], []), name, "exec"), ns)
            sys.stdout.write(out.getvalue())
            assert printed_matches(check.shown, out.getvalue()), (
                f"{name}, line {stmt.lineno}: {ast.get_source_segment(code, stmt)}\n"
                f"  printed {out.getvalue().rstrip()!r}\n  the text shows {check.shown!r}")
            continue
        expr = stmt.value
        if _is_print(stmt):
            expr = expr.args[0]
        actual = eval(compile(ast.Expression(expr), name, "eval"), ns)
        source = ast.get_source_segment(code, expr)
        assert check.predicate(actual), (f"{name}, line {stmt.lineno}: {source}\n  is   "
                                         f"{actual!r}\n  the text shows {check.shown}")


def _block_params():
    files = [ROOT / "README.md"] + sorted(p for p in DOCS.glob("*.md") if p.name != "README.md")
    params = []
    for path in files:
        for b in code_blocks(path):
            if b.skip:
                continue
            default_marks = [pytest.mark.slow] if b.slow else []
            params.append(pytest.param(b, False, id=b.id, marks=default_marks))
            if b.shrink:
                params.append(pytest.param(b, True, id=b.id + ":as-written",
                                           marks=[pytest.mark.slow]))
    return params


@pytest.mark.parametrize(("block", "as_written"), _block_params())
def test_code_block(block: Block, as_written: bool, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples that save files write them here
    run_block(block.code if as_written else _shrunk(block), block.setup, block.id)


def _handwritten_pages() -> list[pathlib.Path]:
    return sorted(p for p in DOCS.glob("*.md") if p.name != "README.md")


def _shrunk(block: Block) -> str:
    code = block.code
    for old, new in block.shrink:
        assert old in code, f"{block.id}: shrink target {old!r} is not in the block"
        code = code.replace(old, new)
    return code


def _shell_params():
    params = []
    for path in [ROOT / "README.md"] + _handwritten_pages():
        for b in code_blocks(path, "bash"):
            # the README's opening block installs the project (.ci/run runs its test command on
            # a fresh machine; tests/test_cli.py runs `jaxcompress demo`)
            if b.skip or (path.name == "README.md" and b.line == 3):
                continue
            params.append(pytest.param(b, id=b.id, marks=[pytest.mark.slow] if b.slow else []))
    return params


@pytest.mark.parametrize("block", _shell_params())
def test_shell_block(block: Block, tmp_path, monkeypatch) -> None:
    """Every shell block of the README and the docs runs as shown, in a fresh folder, after the
    Python blocks above it that make the files it reads (its section's, else the page's): each line
    is a ``jaxcompress`` command that exits with status 0, and every file it writes with ``-o``
    loads with :func:`jaxcompress.load`. A block of other commands (installs, benchmarks) is
    marked ``<!-- test: skip: REASON -->``."""
    monkeypatch.chdir(tmp_path)
    above = [b for b in code_blocks(block.path) if b.line < block.line]
    own = [b for b in above if b.section == block.section]
    for b in own or above:   # its own section's Python blocks make its files, else the page's
        if not (b.skip or b.slow):
            # as in a reader's fresh process: float64 only where the block switches it on (a
            # float32 teacher is what exposed the command line's trimmed record)
            with jax.enable_x64("jax_enable_x64" in b.setup + b.code):
                run_block(_shrunk(b), b.setup, b.id)
    commands = [shlex.split(line, comments=True) for line in _shrunk(block).splitlines()]
    commands = [argv for argv in commands if argv]
    assert commands, f"{block.id}: no command"
    for argv in commands:
        assert argv[0] == "jaxcompress", (
            f"{block.id}: {' '.join(argv)!r} is not a jaxcompress command; mark the block "
            "<!-- test: skip: REASON --> if it cannot run in the tests")
        with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
            rc = cli.main(argv[1:])
        assert rc == 0, f"{block.id}: {' '.join(argv)!r} exited with status {rc}"
        if "-o" in argv:
            jc.load(argv[argv.index("-o") + 1])


def test_markers_and_literals() -> None:
    """The checker itself: literals, ellipses, float tolerance, prose after the literal."""
    pred, _ = expected_output("# 2.6e-09")
    assert pred(2.64e-9) and pred(jnp.float64(2.55e-9)) and not pred(2.8e-9)
    pred, _ = expected_output("# 18, 'paper Eq. 72'")
    assert pred((18, "paper Eq. 72")) and not pred((17, "paper Eq. 72"))
    pred, _ = expected_output("# 'ours', 'a priori ... k_ours = [16, 24] ...'")
    assert pred(("ours", "a priori orders: ours k_ours = [16, 24] (from eps)"))
    pred, _ = expected_output("# 4.9e-07 <= eps: a proof, not a measurement")
    assert pred(4.93e-7)
    pred, _ = expected_output("# (5, 4), [2, 21, 15, 1]")
    assert pred(((5, 4), [2, 21, 15, 1])) and pred(([5, 4], (2, 21, 15, 1)))
    for prose in ("# optional: float64 reaches ~1e-14", "# widths 28 -> 32: friendly",
                  "# or your own module", "# per layer: k, D_k, width"):
        assert expected_output(prose) is None, prose
    with pytest.raises(AssertionError, match="the text shows"):
        run_block("x = [1, 2]\nx  # [1, 3]\n", "", "self-test")


def test_printed_text_checker() -> None:
    """The checker of printed text: tokens, integers exactly, floats to the last digit shown,
    ellipses; and which comments it plans to check."""
    assert printed_matches("[2, 28, 28, 1] 981", "[2, 28, 28, 1] 981\n")
    assert not printed_matches("[2, 28, 28, 1] 1709", "[2, 28, 28, 1] 981\n")
    assert not printed_matches("[2, 28, 28, 1] 981", "[2, 28, 28, 1] 982")
    assert printed_matches("error 2.6e-09 in  ... s", "error 2.64e-09 in 3.1 s")
    assert not printed_matches("error 2.6e-09", "error 2.8e-09")
    assert printed_matches("0.137 True", "0.1374 True") and not printed_matches("0.137", "0.139")
    assert not printed_matches("[2, 21] True", "[2, 21] False")
    assert not printed_matches("7", "7.5") and printed_matches("7.5", "7.5")
    code = ("x = 3                 # 6 neurons: describes the code\n"
            "print(x, 2 * x)       # 3 6\n"
            "print(x, x)\n"
            "# 3 3\n"
            "x                     # 3\n"
            "(x, x)                # (3, 3): prose after the literal\n")
    checks, problems = plan_checks(code)
    assert [c.kind for c in checks.values()] == ["printed", "printed", "value", "value"]
    assert not problems
    run_block(code, "", "self-test")
    for bad in ("x = 3\nx  # 3 apples\n", "x = 3\n# 3\n", "for i in [1]:\n    i  # 1\n"):
        assert plan_checks(bad)[1], bad
        with pytest.raises(AssertionError, match="cannot check"):
            run_block(bad, "", "self-test")
    with pytest.raises(AssertionError, match="the text shows"):
        run_block("x = [1, 2]\nprint(x, 3)  # [1, 2] 4\n", "", "self-test")


def test_every_shown_value_is_checked() -> None:
    """Every comment of the README and the docs pages that shows a value is checked when its
    block runs (without running it: a block of the slow run is planned here too), and no block
    that never runs shows one."""
    problems = []
    for path in [ROOT / "README.md"] + _handwritten_pages():
        for b in code_blocks(path):
            checks, found = plan_checks(b.code)
            if b.skip:
                found += [f"line {ln}: {c}" for ln, c in _comments(b.code).items()
                          if shows_value(c)]
            problems += [f"{b.id}: {p}" for p in found]
    assert not problems, "\n".join(problems)


def test_readme_is_short() -> None:
    """The README gets a newcomer started: the two commands first, at most 250 lines; the depth
    lives in the docs pages."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move a section to docs/"
    assert lines[2:6] == ["```bash", "pip install . && jaxcompress demo",
                          'pip install -e ".[dev]" && python -m pytest', "```"], lines[:6]


def test_docs_pages_examples_found() -> None:
    """The hand-written pages' examples are collected (a fence typo would silently drop one), and
    the pages the README's long sections moved to still carry their examples."""
    counts = {}
    for path in _handwritten_pages():
        blocks = code_blocks(path)
        fences = sum(1 for line in path.read_text().splitlines() if line.strip() == "```python")
        assert len(blocks) == fences, path.name
        counts[path.stem] = sum(1 for b in blocks if not b.skip)
    for stem in ("index", "methods", "certificates", "flax", "io", "scale_out"):
        assert counts.get(stem, 0) >= 1, (stem, counts)


def test_readme_examples_found() -> None:
    """The README's examples are all collected (a fence typo would silently drop one)."""
    blocks = code_blocks(ROOT / "README.md")
    fences = sum(1 for line in (ROOT / "README.md").read_text().splitlines()
                 if line.strip() == "```python")
    assert len(blocks) == fences >= 5
    assert any(b.shrink for b in blocks)


@pytest.mark.parametrize("name", ["README.md", "benchmarks/README.md"] + [
    p.relative_to(ROOT).as_posix() for p in _handwritten_pages()])
def test_markdown_tables_well_formed(name: str) -> None:
    """Every table row has its header's number of cells: a ``|`` inside a code span must be
    written ``\\|`` (GitHub and the docs both split cells on it). Every table has one header
    row, then its ``|---|`` separator, and no other separator."""
    rows, bad, fenced = [], [], False
    headless = []
    sep = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")
    for n, line in enumerate((ROOT / name).read_text().splitlines() + [""], 1):
        fenced ^= line.startswith("```")
        if not fenced and line.startswith("|"):
            rows.append((n, len(re.findall(r"(?<!\\)\|", line)), bool(sep.match(line))))
            continue
        if rows:
            bad += [n for n, cells, _ in rows if cells != rows[0][1]]
            if [is_sep for _, _, is_sep in rows[:2]] != [False, True] or any(
                    is_sep for _, _, is_sep in rows[2:]):
                headless.append(rows[0][0])
            rows = []
    assert not bad, f"{name}: table rows with the wrong number of cells on lines {bad}"
    assert not headless, f"{name}: tables without one header row and separator on lines {headless}"


@pytest.mark.slow
def test_readme_demo_table(tmp_path, capsys) -> None:
    """The table the README says ``jaxcompress demo`` prints: widths, parameters and reductions
    exactly, sup errors within 10% (their last digits depend on the machine's rounding)."""
    from jaxcompress import cli

    readme = (ROOT / "README.md").read_text()
    table = readme.split("What `jaxcompress demo` printed", 1)[1].split("```", 2)[1]
    shown = [line.split() for line in table.strip().splitlines()[1:]]
    assert cli.main(["demo", "--out", str(tmp_path)]) == 0
    printed = {row[0]: row for row in (line.split() for line in capsys.readouterr().out
                                       .splitlines()) if row and row[0].isdigit()}
    for row in shown:
        got = printed[row[0]]
        assert got[1:4] == row[1:4], (row, got)
        assert abs(float(got[4]) / float(row[4]) - 1) < 0.1, (row, got)


# ------------------------------------------------------------------------------------------------
# Doctests of the docstrings
# ------------------------------------------------------------------------------------------------


def _doctest_modules() -> list[str]:
    mods = []
    for name in _docs_module().documented_modules():
        module = importlib.import_module(name)
        tests = doctest.DocTestFinder(exclude_empty=True).find(module)
        if any(t.examples for t in tests):
            mods.append(name)
    return mods


DOCTEST_MODULES = _doctest_modules()


@pytest.mark.parametrize("name", DOCTEST_MODULES)
def test_doctests(name: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    extra = {"jax": jax, "jnp": jnp, "np": np, "jc": jc}
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    report = io.StringIO()
    for test in doctest.DocTestFinder(exclude_empty=True).find(module):
        if test.examples:
            test.globs = {**module.__dict__, **extra}
            runner.run(test, out=report.write)
    assert runner.failures == 0, report.getvalue()


def test_doctests_exist() -> None:
    """The public entry points carry executed examples."""
    assert {"jaxcompress", "jaxcompress.compression", "jaxcompress.methods"} <= set(
        DOCTEST_MODULES), DOCTEST_MODULES


# ------------------------------------------------------------------------------------------------
# The site's structure (without building it)
# ------------------------------------------------------------------------------------------------


def test_every_public_name_has_an_api_page() -> None:
    import jaxcompress.flax as jf

    gen = _docs_module()
    pages = gen.api_pages()
    index = pages["index.rst"]
    for mod in (jc, jf):
        for name in mod.__all__:
            full = f"{mod.__name__}.{name}"
            page = pages.get(f"{full}.rst")
            assert page is not None, f"{full} has no API page"
            assert re.search(rf"^\.\. auto(function|class|data):: {name}$", page, re.M), page
            assert f"~{full}\n" in index and f"   {full}\n" in index, f"{full} not in the index"
            doc = getattr(mod, name).__doc__ or ""
            assert doc.strip(), f"{full} has no docstring"
    for m in gen.documented_modules():
        assert f"module.{m}.rst" in pages


def test_every_readme_section_is_in_the_guide() -> None:
    gen = _docs_module()
    readme = (ROOT / "README.md").read_text()
    headings = [s.heading for s in gen.sections(readme) if s.heading]
    assigned = gen.assign_pages(readme)
    placed = [s.heading for secs in assigned.values() for s in secs if s.heading]
    assert sorted(placed) == sorted(headings)  # each README section on exactly one page
    pages = gen.guide_pages()
    index = (DOCS / "index.md").read_text()
    for stem, _, _ in gen.PAGES:
        assert f"guide/{stem}\n" in index, f"guide/{stem} is not in the index's toctree"
    for stem, text in pages.items():
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            base = DOCS if stem == "_intro" else DOCS / "guide"
            resolved = (base / target).resolve()
            # a generated guide page (not on disk before the site is built): from the intro
            # (docs/index.md) it is "guide/<stem>.md", from another guide page "<stem>.md"
            name = target.removesuffix(".md")
            generated = (name.removeprefix("guide/") if stem == "_intro" else name) in pages
            assert resolved.exists() or generated, f"guide/{stem}: broken link {target}"


def _heading_slugs(path: pathlib.Path, max_level: int = 6) -> set[str]:
    gen = _docs_module()
    fenced, out = False, set()
    for line in path.read_text().splitlines():
        fenced ^= line.startswith("```")
        if not fenced and re.match(rf"^#{{1,{max_level}}} ", line):
            out.add(gen.slug(line.lstrip("#")))
    return out


#: The site gives anchors to headings of levels 1-3 (``myst_heading_anchors`` in docs/conf.py);
#: the guide page demotes benchmarks/README.md by one level, so a link into it must name a
#: heading of level <= 2 there (a level-3 one resolved on GitHub and failed the site's build).
_ANCHOR_LEVEL = {"benchmarks/README.md": 2}


@pytest.mark.parametrize("name", ["README.md"] + [
    p.relative_to(ROOT).as_posix() for p in _handwritten_pages()])
def test_links_resolve(name: str) -> None:
    """Relative links of the README and the hand-written pages, as GitHub follows them: the file
    exists and a ``#heading`` anchor names one of its headings (the site rewrites them)."""
    path = ROOT / name
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        assert resolved.exists(), f"{name}: broken link {target}"
        if anchor and resolved.suffix == ".md":
            level = _ANCHOR_LEVEL.get(str(resolved.relative_to(ROOT)), 6)
            assert anchor in _heading_slugs(resolved, level), (
                f"{name}: no heading #{anchor} of level <= {level} in {file}")


def test_handwritten_pages_in_the_site() -> None:
    """Each hand-written page is in the index's toctree and has its links rewritten for the
    site; the landing page shows the two commands (the README's intro) and a first example
    before its table of contents."""
    gen = _docs_module()
    index = (DOCS / "index.md").read_text()
    stems = [p.stem for p in _handwritten_pages()]
    assert sorted(stems) == sorted(gen.HANDWRITTEN), (stems, gen.HANDWRITTEN)
    for stem in stems:
        assert stem == "index" or f"\n{stem}\n" in index, f"docs/{stem}.md is not in the toctree"
    first_screen = index.split("## Contents", 1)[0]
    assert "{include} guide/_intro.md" in first_screen and "```python" in first_screen
    intro = gen.guide_pages()["_intro"]
    assert "pip install . && jaxcompress demo" in intro
    text = gen._rewrite_links("[a](../README.md#the-api-at-a-glance) [b](../benchmarks/README.md)",
                              DOCS / "methods.md", DOCS)
    assert text == "[a](guide/at_a_glance.md#the-api-at-a-glance) [b](guide/benchmarks.md)", text


def _math_spans(path: pathlib.Path) -> int:
    """The formulas MyST typesets on a page (its ``dollarmath`` extension, as the site uses)."""
    markdown_it = pytest.importorskip("markdown_it")
    dollarmath = pytest.importorskip("mdit_py_plugins.dollarmath")
    md = markdown_it.MarkdownIt("commonmark").enable("table").use(dollarmath.dollarmath_plugin)
    count = 0
    for tok in md.parse(path.read_text()):
        count += tok.type.startswith("math_block")
        count += sum(child.type == "math_inline" for child in tok.children or ())
    return count


@pytest.mark.parametrize("page", ["certificates", "methods", "trace", "scale_out"])
def test_guide_pages_typeset_their_formulas(page: str) -> None:
    """The guide pages write formulas as MyST math (typeset by the site's MathJax), not as code:
    the fast twin of the build check in ``test_docs_build``."""
    assert _math_spans(DOCS / f"{page}.md") >= {"certificates": 40, "methods": 10}.get(page, 1)


def test_every_notebook_is_in_the_docs() -> None:
    link = DOCS / "notebooks"
    assert link.resolve() == (ROOT / "notebooks").resolve()
    assert re.search(r":glob:\n\nnotebooks/\*", (DOCS / "index.md").read_text())
    assert sorted(link.glob("*.ipynb"))


@pytest.mark.slow
def test_docs_build(tmp_path) -> None:
    """The site builds with warnings as errors (what .ci/run does)."""
    sphinx_build = pytest.importorskip("sphinx.cmd.build")
    pytest.importorskip("myst_nb")
    status = sphinx_build.build_main(
        ["-W", "--keep-going", "-q", "-b", "html", "-d", str(tmp_path / "doctrees"), str(DOCS),
         str(tmp_path / "html")])
    assert status == 0
    html = tmp_path / "html"
    assert (html / "api" / "jaxcompress.compress.html").exists()
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        page = (html / "notebooks" / f"{nb.stem}.html").read_text()
        assert "data:image/png" in page or "<img" in page, f"{nb.name}: no figure rendered"
    # the mathematics renders offline: MathJax is loaded from the site itself
    assert (html / "_static" / "mathjax" / "tex-chtml.js").exists()
    page = (html / "api" / "jaxcompress.compress.html").read_text()
    assert 'src="../_static/mathjax/tex-chtml.js"' in page
    # the guide pages typeset their formulas (MyST dollar math becomes MathJax spans)
    for name in ("certificates", "methods"):
        text = (html / f"{name}.html").read_text()
        assert text.count('class="math notranslate nohighlight"') >= 10, name
        assert 'src="_static/mathjax/tex-chtml.js"' in text, name
    for f in html.rglob("*.html"):
        scripts = re.findall(r'<script[^>]*src="([^"]+)"', f.read_text())
        remote = [src for src in scripts if re.match(r"^(https?:)?//", src)]
        assert not remote, f"{f.relative_to(html)} loads {remote}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, *sys.argv[1:]]))
