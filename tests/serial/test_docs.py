"""The documentation does not lie: links resolve, README's commands parse, the guide's options
exist.

* Every relative link in README.md and docs/**/*.md points at an existing file, and a
  ``#anchor`` into a Markdown file names one of its headings (GitHub's slug rules).
* Every ``distmm`` command in README.md's fenced code blocks (``distmm ...``,
  ``.venv/bin/distmm ...``, or after ``mpiexec -n N`` / ``mpirun -n N``) is accepted by the
  real argument parser, built from :func:`distmm.cli.build_parser` without running anything.
* Every option that docs/guide.md lists under a ``### distmm COMMAND`` heading is an option of
  that command in the parser.

Pages written on other branches (:data:`PENDING`) are skipped by name while they are absent;
``test_pending_pages`` reports which ones.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

import pytest

from distmm.cli import build_parser
from distmm.cli.common import UsageError

ROOT = Path(__file__).resolve().parents[2]
# The "Application API" pages, merged from parallel branches; linked before they exist here.
PENDING = frozenset({"docs/api.md", "docs/primitives.md", "docs/als.md", "docs/reliability.md"})
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LAUNCHERS = ("mpiexec", "mpirun")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose_lines(text: str):
    """(line number, line) of the lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def code_blocks(text: str) -> list[list[str]]:
    """The lines of each fenced code block."""
    blocks, current = [], None
    for line in text.splitlines():
        if FENCE.match(line):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link and code markup dropped, lower case, punctuation
    removed (letters, digits, '_', '-' and spaces kept), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path, skipped: set[str]) -> list[str]:
    """Every relative link of ``path`` that does not resolve, as 'file:line: target (why)'.
    Links to absent :data:`PENDING` pages are added to ``skipped`` instead."""
    problems = []
    text = path.read_text(encoding="utf-8")
    for number, line in prose_lines(text):
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, mailto:, ...
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)}:{number}: {target}"
            try:
                rel = dest.relative_to(ROOT).as_posix()
            except ValueError:
                problems.append(f"{where} (outside the repository)")
                continue
            if not dest.exists():
                if rel in PENDING:
                    skipped.add(rel)
                else:
                    problems.append(f"{where} (no such file)")
                continue
            if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where} (no heading with anchor #{anchor})")
    return problems


def test_every_relative_link_resolves():
    skipped: set[str] = set()
    problems = [p for f in markdown_files() for p in broken_links(f, skipped)]
    if skipped:
        print(f"links to pending pages skipped (absent): {', '.join(sorted(skipped))}")
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_pending_pages():
    absent = sorted(p for p in PENDING if not (ROOT / p).exists())
    if absent:
        pytest.skip(f"pending Application API pages absent on this branch: {', '.join(absent)}")


def test_link_checker_finds_broken_files_and_anchors(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# Title\n\n## Cluster: the site's MPI\n")
    page = tmp_path / "docs" / "a.md"
    page.write_text("[ok](b.md#cluster-the-sites-mpi) [self](#top-part)\n"
                    "# Top part\n"
                    "[bad anchor](b.md#nope) [bad file](c.md) `[code](x.md)` "
                    "[web](https://example.org/x.md) [pending](api.md)\n"
                    "```\n[in a fence](missing.md)\n```\n")
    skipped: set[str] = set()
    problems = broken_links(page, skipped)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "b.md#nope (no heading with anchor #nope)", "c.md (no such file)"]
    assert skipped == {"docs/api.md"}


def test_slugs_follow_github():
    assert slug("Cluster: the site's MPI") == "cluster-the-sites-mpi"
    assert slug("`distmm simulate sparch`") == "distmm-simulate-sparch"
    assert slug("Ablation (Fig. 16), condensing, prefetching") == \
        "ablation-fig-16-condensing-prefetching"
    assert slug("1.5D dense shifting (`15d-dense-shift`)") == "15d-dense-shifting-15d-dense-shift"


def distmm_arguments(line: str) -> list[str] | None:
    """The arguments after ``distmm`` in a shell line that runs it, else None."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    if words and words[0] == "$":
        words = words[1:]
    if words and Path(words[0]).name in LAUNCHERS:
        i = 1
        while i < len(words) and words[i].startswith("-"):
            i += 2 if words[i] in ("-n", "-np") else 1
        words = words[i:]
    if words and Path(words[0]).name == "distmm":
        return words[1:]
    return None


def readme_commands() -> list[list[str]]:
    """The ``distmm`` commands of README.md's and the user guide's fenced code blocks."""
    commands = []
    blocks = [block for page in ("README.md", "docs/guide.md")
              for block in code_blocks((ROOT / page).read_text(encoding="utf-8"))]
    for block in blocks:
        logical = ""
        for line in block:
            logical += line.rstrip()
            if logical.endswith("\\"):
                logical = logical[:-1] + " "
                continue
            args = distmm_arguments(logical)
            if args is not None and not (args and args[0][:1].isdigit()):  # not the
                commands.append(args)  # output of `distmm --version` ("distmm 0.1.0")
            logical = ""
    return commands


def parse(args: list[str]) -> argparse.Namespace | str:
    """Parse with the real parser; return the namespace or argparse's complaint."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return build_parser().parse_args(args)
    except UsageError as exc:  # the CLI's parser reports usage errors for agreement first
        return str(exc)
    except SystemExit as exc:
        if exc.code == 0 and args == ["--version"]:
            return argparse.Namespace(command="--version")
        return err.getvalue().strip() or f"exit {exc.code}"


def test_readme_commands_are_accepted_by_the_parser():
    commands = readme_commands()
    rejected = [f"distmm {shlex.join(a)}\n  -> {r}" for a in commands
                if isinstance(r := parse(a), str)]
    assert not rejected, "README commands the parser rejects:\n" + "\n".join(rejected)
    families = {parse(a).command for a in commands}
    assert {"run", "bench", "plan", "calibrate", "spgemm", "simulate"} <= families, families


def test_command_extraction_and_rejection():
    assert distmm_arguments("mpiexec -n 4 distmm run sddmm --sparse S.mtx") == [
        "run", "sddmm", "--sparse", "S.mtx"]
    assert distmm_arguments(".venv/bin/mpiexec -n 2 .venv/bin/distmm plan --m 4") == [
        "plan", "--m", "4"]
    assert distmm_arguments("distmm info  # the MPI in use") == ["info"]
    assert distmm_arguments("./tasks test") is None
    assert isinstance(parse(["run", "sddmm", "--sprase", "S.mtx", "--out", "o.h5"]), str)
    assert isinstance(parse(["plan", "--m", "4"]), str)  # missing required options
    assert not isinstance(parse(["--version"]), str)


def _subparser(parser: argparse.ArgumentParser, path: list[str]) -> argparse.ArgumentParser:
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def guide_options() -> dict[tuple[str, ...], set[str]]:
    """Options listed in the first column of each '### distmm COMMAND' section's tables."""
    sections: dict[tuple[str, ...], set[str]] = {}
    current = None
    for _, line in prose_lines((ROOT / "docs" / "guide.md").read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if m:
            words = m.group(2).replace("`", "").split()
            current = tuple(words[1:]) if len(m.group(1)) == 3 and words[0] == "distmm" else None
            if current is not None:
                sections[current] = set()
            continue
        if current is not None and line.startswith("| `-"):
            first_cell = re.split(r"(?<!\\)\|", line)[1]  # cells end at unescaped pipes
            for code in re.findall(r"`([^`]+)`", first_cell):
                sections[current].add(code.split()[0])
    return sections


def unknown_guide_options() -> list[str]:
    """'distmm COMMAND OPTION' for every option the guide lists that the parser lacks."""
    parser = build_parser()
    unknown = []
    for path, options in guide_options().items():
        known = {s for a in _subparser(parser, list(path))._actions for s in a.option_strings}
        unknown += [f"distmm {' '.join(path)} {o}" for o in sorted(options - known)]
    return unknown


def test_guide_options_exist_in_the_parser():
    assert {("run",), ("bench",), ("plan",), ("calibrate",), ("spgemm",),
            ("simulate", "sparch"), ("simulate", "dynaspase")} <= set(guide_options())
    unknown = unknown_guide_options()
    assert not unknown, "options the guide documents but the parser lacks:\n" + "\n".join(unknown)


def test_guide_option_check_finds_a_wrong_option(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(
        "### distmm plan\n\n| option | meaning |\n|---|---|\n| `--m M` | rows |\n"
        "| `--order fiber\\|layer` | not a plan option |\n```\n| `--in-fence` | x |\n```\n"
        "### distmm simulate sparch\n\n| `--x FILE`, `--bogus` | x |\n")
    assert unknown_guide_options() == ["distmm plan --order", "distmm simulate sparch --bogus"]


NUMPY_DOCUMENTED = ("distmm.api.distribute", "distmm.api.as_coo_share", "distmm.perf.bench.run_op",
                    "distmm.perf.bench.op_inputs", "distmm.perf.bench.op_output_side",
                    "distmm.perf.bench.op_flops",
                    "distmm.runtime.extras.require_extra", "distmm.runtime.info.collect",
                    "distmm.io.hdf5.read_hdf5", "distmm.io.hdf5.h5_header",
                    "distmm.io.hdf5.sparse_header", "distmm.io.hdf5.read_sparse",
                    "distmm.io.convert.gather_share", "distmm.io.convert.write_csr_h5",
                    "distmm.runtime.signals.exit_code", "distmm.runtime.signals.handled",
                    "distmm.runtime.signals.agreed", "distmm.runtime.signals.stop_if_requested",
                    "distmm.runtime.watchdog.describe", "distmm.runtime.watchdog.waiting",
                    "distmm.runtime.watchdog.running")


@pytest.mark.parametrize("qualname", NUMPY_DOCUMENTED)
def test_public_functions_have_numpy_docstrings(qualname):
    import importlib
    import inspect

    module, _, name = qualname.rpartition(".")
    func = getattr(importlib.import_module(module), name)
    doc = inspect.getdoc(func) or ""
    assert re.search(r"^Returns\n-------$", doc, re.M), f"{qualname}: no Returns section"
    params = [p for p in inspect.signature(func).parameters if p not in ("self", "cls")]
    if params:
        assert re.search(r"^Parameters\n----------$", doc, re.M), f"{qualname}: no Parameters"
    # every parameter appears as "name :" (or in a "a, b :" group) in the Parameters section
    section = doc.split("Returns\n-------")[0]
    named = {n.strip() for line in re.findall(r"^(\w[\w, ]*) :", section, re.M)
             for n in line.split(",")}
    assert not set(params) - named, f"{qualname}: undocumented {sorted(set(params) - named)}"
