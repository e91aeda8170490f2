"""The documentation: a short README for newcomers, and a site built from docs/ without a warning.

The README is what a newcomer reads in ten minutes (issue 34): at most 300 lines, the two commands
CI runs, links that resolve inside the repository, the paper cited by its title. The reference lives
in docs/*.md, built by mkdocs with --strict: a broken link or anchor between pages, or a page left
out of the nav, fails the build. (tests/test_readme.py runs every code block of both.)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MKDOCS = Path(sys.executable).parent / "mkdocs"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move detail into a docs/ page"


def test_readme_keeps_the_two_commands_ci_runs():
    """`make demo` and `make test` in the README are the targets .ci/run calls, and the Makefile has them."""
    readme, ci, makefile = README.read_text(), (ROOT / ".ci" / "run").read_text(), (ROOT / "Makefile").read_text()
    for target in ("demo", "test"):
        assert re.search(rf"^make {target}\b", readme, re.M), f"README: no `make {target}` line"
        assert f"make {target}" in ci, f".ci/run does not run `make {target}`"
        assert re.search(rf"^{target}:", makefile, re.M), f"Makefile: no {target} target"
    # The load campaigns are outside `make test` but not outside CI.
    assert "make test-load" in ci and re.search(r"^test-load:", makefile, re.M)


def test_readme_links_resolve_inside_the_repository():
    """Every relative link of the README names a file of this repository (no ../shared/ paths)."""
    targets = [t for t in LINK.findall(README.read_text()) if not re.match(r"^[a-z]+://", t)]
    assert len(targets) >= 10
    for target in targets:
        path = (ROOT / target.split("#")[0]).resolve()
        assert path.is_relative_to(ROOT) and path.exists(), f"README links to {target}, not in the repository"


def test_paper_cited_by_title_never_by_an_outside_path():
    title = "Proper Scoring Rules for Agentic Uncertainty Quantification"
    for page in [README, DOCS / "index.md", DOCS / "design.md"]:
        assert title in page.read_text(), f"{page.name}: the paper is cited by its title"
    for page in [README, *DOCS.glob("*.md")]:
        assert "../shared" not in page.read_text() and "/work/" not in page.read_text(), page.name


def test_every_page_is_in_the_nav():
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    listed = {page for entry in nav for page in entry.values()}
    assert listed == {p.name for p in DOCS.glob("*.md")}


def test_site_builds_strict(tmp_path):
    out = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "WARNING" not in out.stderr, out.stderr[-3000:]
    for page in DOCS.glob("*.md"):
        html = tmp_path / "site" / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert html.exists(), f"{page.name} was not built"
    # Every term the report prints has its legend entry on the report page.
    report = (tmp_path / "site" / "report" / "index.html").read_text()
    for term in ["Delta_practice", "cen-simple (q_Z~0)", "cen-exact", "AURC", "phi_w", "T-ECE", "higher is better"]:
        assert term in report, term


def test_strict_build_fails_on_a_broken_anchor(tmp_path):
    """The check above can fail: the same config on a copy of docs/ with one bad anchor is refused."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for page in DOCS.glob("*.md"):
        (docs / page.name).write_text(page.read_text())
    (docs / "index.md").write_text((docs / "index.md").read_text() + "\n[x](report.md#no-such-section)\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config["docs_dir"] = str(docs)
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    out = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert out.returncode != 0 and "no-such-section" in out.stderr
