"""Generate the docs pages that must not drift: the guide (from README.md) and the API listing.

Nothing here is written by hand twice. ``docs/conf.py`` calls :func:`generate` before Sphinx
looks for sources, which writes (into git-ignored folders of ``docs/``):

* ``guide/*.md``: ``README.md`` split at its ``## `` headings into the pages of :data:`PAGES`
  (a heading not named there joins the page of the section before it, so a new README section
  appears in the docs without editing them), with links rewritten for the site;
  ``guide/benchmarks.md`` is ``benchmarks/README.md`` with every figure in
  ``benchmarks/results/*.png``;
* ``api/``: one page per public name, every name in ``jaxcompress.__all__`` and
  ``jaxcompress.flax.__all__`` (grouped by the module that defines it, see :data:`GROUPS`),
  and one page per module for the module docstrings (where the maths lives).

The hand-written pages (``docs/*.md``: methods, certificates, Flax, saving and loading, scale-out,
reproducing the paper) link to repository files as GitHub shows them (``../README.md#...``,
``../benchmarks/README.md``); :func:`setup` rewrites those links for the site as Sphinx reads
each page (``source-read``), the same way as the README's.

The notebooks need no generation: ``docs/notebooks`` is a link to ``notebooks/`` and the index's
toctree takes ``notebooks/*``. ``tests/test_docs.py`` imports this file to check that every
public name gets a page and every README section a place, without building the site.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import pathlib
import pkgutil
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

#: Guide pages in site order: (file stem, title, README ``## `` headings that start the page).
#: ``benchmarks`` takes no README section: it is ``benchmarks/README.md`` and its figures.
PAGES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("quickstart", "Quick start", ("Quick start",)),
    ("at_a_glance", "The API at a glance", ("The API at a glance",)),
    ("results", "Results", ("Results",)),
    ("benchmarks", "Benchmarks", ()),
    ("documentation", "Documentation", ("Documentation",)),
)
#: The "See also" line at the top of a guide page.
SEE_ALSO = {
    "quickstart": "{doc}`the quick-start notebook <../notebooks/01_quickstart>` (the same steps "
                  "with plots) and the {doc}`API reference <../api/index>`",
    "at_a_glance": "{doc}`the methods in depth <../methods>` (which to use, and how they work) "
                   "and the {doc}`API reference <../api/index>` for every argument",
}
#: The hand-written pages of ``docs/`` (their links are rewritten as Sphinx reads them).
HANDWRITTEN = tuple(sorted(p.stem for p in DOCS.glob("*.md") if p.name != "README.md"))

#: API sections: defining module -> section title. Modules not listed get a section named after
#: themselves, at the end, so a new module's names are documented without editing this file.
GROUPS: dict[str, str] = {
    "jaxcompress.compression": "Compressing",
    "jaxcompress.methods": "Methods",
    "jaxcompress.select": "Selectors",
    "jaxcompress.domains": "Domains",
    "jaxcompress.features": "Feature maps",
    "jaxcompress.certificates": "Certificates",
    "jaxcompress.search": "How small can it get (the search)",
    "jaxcompress.polish": "Polishing",
    "jaxcompress.sharding": "Scale-out",
    "jaxcompress.evaluate": "Measuring the error",
    "jaxcompress.mlp": "Networks",
    "jaxcompress.activations": "Activations",
    "jaxcompress.taylor": "Taylor polynomials",
    "jaxcompress.io": "Saving and loading",
    "jaxcompress.flax": "Flax (jaxcompress.flax)",
    "jaxcompress.graph": "Tracing any JAX function",
    "jaxcompress.modules": "Modules: nnx, linen, Equinox",
}

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
_TEST_MARKER = re.compile(r"^<!--\s*test:.*?-->\n?", re.S | re.M)


# ------------------------------------------------------------------------------------------------
# The guide: README.md split into pages
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Section:
    heading: str  # "" for the text before the first "## " heading
    body: str


def sections(text: str, level: int = 2) -> list[Section]:
    """Split markdown at headings of ``level`` (outside code fences)."""
    mark = "#" * level + " "
    out, heading, lines, fenced = [], "", [], False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
        if not fenced and line.startswith(mark):
            out.append(Section(heading, "".join(lines)))
            heading, lines = line[len(mark):].strip(), []
        else:
            lines.append(line)
    out.append(Section(heading, "".join(lines)))
    return out


def assign_pages(readme: str) -> dict[str, list[Section]]:
    """README sections per guide page: each page takes its named headings and the unnamed ones
    that follow them (in README order). The intro (before the first heading) is ``"index"``."""
    starts = {h: stem for stem, _, heads in PAGES for h in heads}
    pages: dict[str, list[Section]] = {"index": []} | {stem: [] for stem, _, _ in PAGES}
    current = "index"
    for sec in sections(readme):
        current = starts.get(sec.heading, current)
        pages[current].append(sec)
    missing = [h for h in starts if not any(s.heading == h for s in sum(pages.values(), []))]
    if missing:
        raise ValueError(f"docs: README.md has no section {missing} (named in PAGES of "
                         f"{pathlib.Path(__file__).relative_to(ROOT)}); update PAGES")
    return pages


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and MyST write it (``"The API at a glance"`` ->
    ``"the-api-at-a-glance"``)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def readme_page(anchor: str, readme: str | None = None) -> str:
    """The site page (a path under ``docs/``) that holds the README section ``#anchor``."""
    readme = (ROOT / "README.md").read_text() if readme is None else readme
    for stem, secs in assign_pages(readme).items():
        if any(sec.heading and slug(sec.heading) == anchor for sec in secs):
            return "index.md" if stem == "index" else f"guide/{stem}.md"
    return "index.md"


def _rewrite_links(text: str, source: pathlib.Path, page_dir: pathlib.Path) -> str:
    """Make the links of ``source`` (a repository file) work from a page in ``page_dir``."""

    def fix(m: re.Match) -> str:
        bang, label, target = m.groups()
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            return m.group(0)
        path, _, anchor = target.partition("#")
        resolved = (source.parent / path).resolve()
        rel = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else path
        if rel == "benchmarks/README.md":
            resolved = DOCS / "guide" / "benchmarks.md"
        elif rel == "README.md":
            resolved = DOCS / readme_page(anchor)
        new = os.path.relpath(resolved, page_dir)
        return f"{bang}[{label}]({new}{'#' + anchor if anchor else ''})"

    return _LINK.sub(fix, text)


def _demote(text: str, by: int) -> str:
    """Push every heading down ``by`` levels (outside code fences)."""
    out, fenced = [], False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
        if not fenced and re.match(r"^#{1,5} ", line):
            line = "#" * by + line
        out.append(line)
    return "".join(out)


def _clean(body: str) -> str:
    return _TEST_MARKER.sub("", body).strip("\n") + "\n"


def guide_pages(readme_path: pathlib.Path = ROOT / "README.md") -> dict[str, str]:
    """``{file stem: markdown}`` of the guide pages (``"_intro"``, the README's text before
    its first section, is included by ``docs/index.md``)."""
    page_dir = DOCS / "guide"
    readme = readme_path.read_text()
    assigned = assign_pages(readme)
    header = ("<!-- Generated from README.md by docs/_ext/jaxcompress_docs.py: edit the README, "
              "not this file. -->\n\n")
    intro = re.sub(r"^\s*# [^\n]*\n", "", assigned["index"][0].body)  # the title: the index's
    out = {"_intro": header + _rewrite_links(_clean(intro), readme_path, DOCS)}
    for stem, title, _ in PAGES:
        parts = [header, f"# {title}\n\n"]
        if stem in SEE_ALSO:
            parts.append(f"See also {SEE_ALSO[stem]}.\n\n")
        for sec in assigned[stem]:
            if sec.heading != title:
                parts.append(f"## {sec.heading}\n\n")
            parts.append(_rewrite_links(_clean(_demote(sec.body, 1)), readme_path, page_dir))
            parts.append("\n")
        if stem == "benchmarks":
            parts.append(_benchmarks_extra(page_dir, "".join(parts)))
        out[stem] = "".join(parts)
    return out


def _benchmarks_extra(page_dir: pathlib.Path, so_far: str) -> str:
    """benchmarks/README.md, then a gallery of the figures it does not show."""
    bench = ROOT / "benchmarks" / "README.md"
    text = _rewrite_links(_clean(bench.read_text()), bench, page_dir)
    text = _demote(text, 1)  # its "# title" becomes a section of this page
    shown = set(re.findall(r"results/([\w.-]+\.png)", so_far + text))
    figures = sorted((ROOT / "benchmarks" / "results").glob("*.png"))
    rest = [f for f in figures if f.name not in shown]
    gallery = ""
    if rest:
        gallery = "\n## Every other figure in `benchmarks/results/`\n\n"
        gallery += ("Figures written by the benchmark scripts that the text above does not show "
                    "(quick runs, other devices or dtypes), each beside its JSON of the same "
                    "name.\n\n")
        for f in rest:
            gallery += f"### `{f.name}`\n\n![{f.stem}]({os.path.relpath(f, page_dir)})\n\n"
    return "\n" + text + gallery


# ------------------------------------------------------------------------------------------------
# The API reference
# ------------------------------------------------------------------------------------------------


def public_names() -> dict[str, list[str]]:
    """``{public module: its __all__}`` for the modules whose names are the public API."""
    out = {}
    for name in ("jaxcompress", "jaxcompress.flax"):
        out[name] = list(importlib.import_module(name).__all__)
    return out


def _group(obj, public_module: str) -> str:
    mod = getattr(obj, "__module__", public_module) or public_module
    for prefix in sorted(GROUPS, key=len, reverse=True):
        if mod == prefix or mod.startswith(prefix + "."):
            return prefix
    return mod


def api_entries() -> list[tuple[str, str, str, object]]:
    """``(group module, public module, name, object)`` for every public name, in page order."""
    entries = []
    for public, names in public_names().items():
        mod = importlib.import_module(public)
        for name in names:
            obj = getattr(mod, name)
            entries.append((_group(obj, public), public, name, obj))
    order = list(GROUPS)
    entries.sort(key=lambda e: (order.index(e[0]) if e[0] in order else len(order), e[0],
                                e[1], e[2].lower()))
    return entries


def documented_modules() -> list[str]:
    """Every module of the package (private ones excluded), for the module pages."""
    import jaxcompress

    mods = ["jaxcompress"]
    for info in pkgutil.walk_packages(jaxcompress.__path__, "jaxcompress."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            mods.append(info.name)
    return sorted(mods)


def _stub(public: str, name: str, obj) -> str:
    full = f"{public}.{name}"
    if inspect.isclass(obj):
        body = f".. autoclass:: {name}\n   :members:\n   :special-members: __call__\n"
    elif callable(obj):
        body = f".. autofunction:: {name}\n"
    else:
        body = f".. autodata:: {name}\n"
    return f"{full}\n{'=' * len(full)}\n\n.. currentmodule:: {public}\n\n{body}"


def api_pages() -> dict[str, str]:
    """``{path under docs/api: rst}``: the index, one page per public name, one per module."""
    pages: dict[str, str] = {}
    head = ".. Generated by docs/_ext/jaxcompress_docs.py from __all__: do not edit.\n\n"
    lines = [head, "API reference\n=============\n\n",
             "Every public name: ``import jaxcompress as jc`` exports the names below except "
             "those of ``jaxcompress.flax`` (``import jaxcompress.flax as jf``). Each page is "
             "generated from the docstring, where the maths and the paper's equation numbers "
             "are; the :doc:`module pages <modules>` hold each module's own overview.\n\n"]
    current = None
    for group, public, name, obj in api_entries():
        if group != current:
            title = GROUPS.get(group, group)
            lines.append(f"\n{title}\n{'-' * len(title)}\n\n.. autosummary::\n\n")
            current = group
        lines.append(f"   ~{public}.{name}\n")
        pages[f"{public}.{name}.rst"] = head + _stub(public, name, obj)
    lines.append("\n.. toctree::\n   :hidden:\n\n   modules\n")
    for _, public, name, _ in api_entries():
        lines.append(f"   {public}.{name}\n")
    pages["index.rst"] = "".join(lines)
    mods = documented_modules()
    # A module named like a public function (jaxcompress.polish the module and jc.polish the
    # function) would describe the same dotted name twice: its page then claims no index entry.
    public = {f"{p}.{n}" for _, p, n, _ in api_entries()}
    mod_lines = [head, "Modules\n=======\n\n",
                 "Each module's docstring: what it implements, the maths and the paper's "
                 "equations. The public names are documented on their own pages "
                 "(:doc:`index`).\n\n.. toctree::\n   :maxdepth: 1\n\n"]
    for m in mods:
        mod_lines.append(f"   module.{m}\n")
        title = f"``{m}``"
        options = "   :no-members:\n" + ("   :no-index:\n" if m in public else "")
        pages[f"module.{m}.rst"] = (head + f"{title}\n{'=' * len(title)}\n\n"
                                    f".. automodule:: {m}\n{options}")
    pages["modules.rst"] = "".join(mod_lines)
    return pages


# ------------------------------------------------------------------------------------------------
# Writing
# ------------------------------------------------------------------------------------------------


def _write_tree(folder: pathlib.Path, files: dict[str, str]) -> None:
    """Make ``folder`` hold exactly ``files``; unchanged files keep their mtime (Sphinx then
    rebuilds only what changed)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if old.is_file() and old.name not in files:
            old.unlink()
    for name, text in files.items():
        path = folder / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


def generate() -> None:
    """Write ``docs/guide/`` and ``docs/api/`` (both git-ignored)."""
    _write_tree(DOCS / "guide", {f"{k}.md": v for k, v in guide_pages().items()})
    _write_tree(DOCS / "api", api_pages())


def _check_docstrings(app) -> None:
    """Warn (an error under ``-W``) for a public name without a docstring of its own."""
    from sphinx.util import logging

    log = logging.getLogger(__name__)
    for _, public, name, obj in api_entries():
        if not (getattr(obj, "__doc__", None) or "").strip():
            log.warning(f"{public}.{name} has no docstring: its API page would be empty")


def _rewrite_handwritten(app, docname: str, source: list[str]) -> None:
    """``source-read``: a hand-written page's repository links, rewritten for the site."""
    if docname in HANDWRITTEN:
        source[0] = _rewrite_links(source[0], DOCS / f"{docname}.md", DOCS)


def setup(app):
    app.connect("builder-inited", _check_docstrings)
    app.connect("source-read", _rewrite_handwritten)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
