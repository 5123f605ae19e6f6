"""mkdocs glue, loaded twice by mkdocs.yml: as the mkdocs-macros module (``define_env``) and as a hook
file (``on_files``). Pages opt in to macros with ``render_macros: true``; every templated page renders
through ``design_doc`` so the site and ``render_reference_design()`` share one rendering path.

``on_files`` adds two kinds of virtual files that live outside ``docs/``:
  * ``assets/diagrams/*`` -- the Excalidraw exports in designs/d2/diagrams (one copy in the repo, not two);
  * ``code/<path>.md`` -- a page per linked source file with numbered, anchored lines, so the design's
    links to the code work offline without a repository host.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mkdocs.structure.files import File, Files
from mkdocs.utils import get_relative_url

from d2kit.bench import check, results, score_speed
from d2kit.drills import mutants
from d2kit.scoring.calibration import render_results_markdown
from d2kit.scoring.diagram_calibration import render_results_markdown as render_diagram_results_markdown
from d2kit.scoring.rubric import render_rubric_markdown
from d2kit.site import design_doc, glossary, samples
from d2kit.site.alternatives import alternatives_markdown
from d2kit.site.cheatsheet import cheatsheet_markdown
from d2kit.site.design_doc import DIAGRAM_DIR, DRILLS_BY_NAME, REPO_ROOT
from d2kit.site.rubric_pages import calibration_markdown, second_questions_markdown, table_cell

CODE_ROOTS = ("reference_impl", "d2kit", "load")


def _summary(path: Path) -> str:
    """First line of a module's docstring, or of a SQL file's leading comment."""
    source = path.read_text(encoding="utf-8")
    if path.suffix == ".sql":
        first = next((line for line in source.splitlines() if line.startswith("--")), "")
        return first.lstrip("- ").strip()
    try:
        docstring = ast.get_docstring(ast.parse(source)) or ""
    except SyntaxError:  # a file mid-edit by someone else must not break the site
        docstring = ""
    return docstring.strip().split("\n")[0]


def _code_files() -> dict[str, str]:
    """Every source file of the implementation, so any link from the docs to the code resolves."""
    files = {}
    for root in CODE_ROOTS:
        for path in sorted((REPO_ROOT / root).rglob("*")):
            source = path.suffix in (".py", ".sql") and path.name != "__init__.py"
            if source and "__pycache__" not in path.parts:
                files[str(path.relative_to(REPO_ROOT))] = _summary(path)
    return files


def _fence_for(source: str) -> str:
    """A backtick fence longer than any backtick run inside the file."""
    longest = max((len(run) for run in re.findall(r"`+", source)), default=0)
    return "`" * max(3, longest + 1)


def _code_page(path: str, description: str) -> str:
    header = f"# `{path}`\n\n{description}\n\n"
    source_path = REPO_ROOT / path
    language = {".py": "python", ".sql": "sql"}.get(source_path.suffix, "text")
    fence = _fence_for(source_path.read_text(encoding="utf-8"))
    parts = [header]
    for section in design_doc.code_sections(path):
        title = f"`{section.name}`" if section.name else "Top of the file"
        parts.append(f"## {title} {{ #{section.anchor} }}\n")
        body = "\n".join(section.lines).rstrip("\n")
        parts.append(f'{fence}{language} linenums="{section.first_line}"\n{body}\n{fence}\n')
    return "\n".join(parts)


def _code_index(files: dict[str, str]) -> str:
    rows = [f"| [`{path}`](/code/{path}.md) | {summary.replace('|', '/')} |"
            for path, summary in files.items()]
    return ("# The code\n\nThe reference implementation the design describes. Every link in the design "
            "lands on a section of one of these pages.\n\n| File | What it holds |\n|---|---|\n"
            + "\n".join(rows) + "\n")


def on_files(files: Files, config) -> Files:
    for export in sorted(DIAGRAM_DIR.glob("*.svg")) + sorted(DIAGRAM_DIR.glob("*.png")):
        files.append(File.generated(config, f"assets/diagrams/{export.name}", abs_src_path=str(export)))
    for chart in sorted(design_doc.LOAD_RESULTS.parent.glob("*.svg")):
        files.append(File.generated(config, f"assets/load/{chart.name}", abs_src_path=str(chart)))
    code_files = _code_files()
    files.append(File.generated(config, "code/index.md", content=_code_index(code_files)))
    for path, description in code_files.items():
        files.append(File.generated(config, f"code/{path}.md", content=_code_page(path, description)))
    return files


GLOSSARY_PAGE = "glossary.md"


def on_page_content(html: str, page, config, files) -> str:
    """Link the first use of each glossary term on every page (but the glossary and the code listings)."""
    source = page.file.src_uri
    if source == GLOSSARY_PAGE or source.startswith("code/"):
        return html
    glossary_url = get_relative_url(files.get_file_from_path(GLOSSARY_PAGE).url, page.url)
    return glossary.link_first_uses(html, glossary_url)


# --- mkdocs-macros --------------------------------------------------------------------------------------

def _rewrite_relative_links(markdown: str, prefix: str) -> str:
    """Links inside an embedded report are relative to its folder; make them relative to the drill page."""
    def fix(match: re.Match[str]) -> str:
        target = match.group(2)
        if re.match(r"^(?:[a-z]+:|/|#)", target):
            return match.group(0)
        return f"{match.group(1)}({prefix}{target})"
    return re.sub(r"(!?\[[^\]]*\])\(([^)\s]+)\)", fix, markdown)


def _demote_headings(markdown: str, levels: int) -> str:
    return re.sub(r"^(#{1,6})(\s)", lambda m: "#" * min(6, len(m.group(1)) + levels) + m.group(2),
                  markdown, flags=re.MULTILINE)


# Lines of a published report that the drill page already shows (title, question, answer), by their start.
_REPORT_LINES_SHOWN_ABOVE = ("# ", "> **Follow-up", "> **Beyond the seven follow-ups",
                             "**The answer in three sentences.**")


def drill_report(name: str) -> str:
    """The last report of a drill, with its timeline, or how to produce one."""
    drill = DRILLS_BY_NAME[name]
    report = design_doc.read_drill_report(name)
    if report is None:
        return ('!!! note "No report yet"\n\n'
                f"    Run `d2kit drill run {drill.name} --publish` to produce the report; it is copied to "
                f"`docs/drills/reports/{drill.name}/` and appears here.\n")
    parts = []
    mode = report.mode and f"{report.mode} mode"
    status = ", ".join(x for x in (report.verdict, mode, report.finished_at) if x)
    if status:
        parts.append(f"**Last run:** {status}\n")
    prefix = f"reports/{name}/"
    body = "\n".join(line for line in (report.markdown or "").splitlines()
                     if not line.startswith(_REPORT_LINES_SHOWN_ABOVE))
    if report.has_timeline and "timeline.svg" not in body:
        parts.append(f'<figure markdown="span">\n  ![Timeline of the last run]({prefix}timeline.svg)\n'
                     f"  <figcaption>Timeline of the last run of <code>{name}</code></figcaption>\n"
                     "</figure>\n")
    if body:
        parts.append(_demote_headings(_rewrite_relative_links(body, prefix), 2))
    if (design_doc.DRILL_REPORTS / name / "report.json").exists():
        parts.append(f"[Raw report (JSON)]({prefix}report.json)\n")
    return "\n".join(parts)


def _drill_module(name: str) -> Path:
    return REPO_ROOT / "d2kit" / "drills" / f"{name.replace('-', '_')}.py"


def drill_module_exists(name: str) -> bool:
    return _drill_module(name).exists()


def drill_about(name: str) -> str:
    """What the drill shows and how, from its module's docstring (question, answer, method paragraphs), so
    the page says what the code does."""
    source = _drill_module(name).read_text(encoding="utf-8")
    docstring = ast.get_docstring(ast.parse(source)) or ""
    paragraphs = [" ".join(p.split()).replace("``", "`") for p in docstring.split("\n\n") if p.strip()]
    parts = []
    if len(paragraphs) > 1:
        parts += ["## The answer it demonstrates", "", paragraphs[1], ""]
    if len(paragraphs) > 2:
        method = [re.sub(r"^How the drill does it:\s*", "", p) for p in paragraphs[2:]]
        method = [p[:1].upper() + p[1:] for p in method]
        parts += ["## How the drill does it", "", *(f"{p}\n" for p in method)]
    return "\n".join(parts)


def drill_run(name: str) -> str:
    """How to run a drill, where its report goes, and its code."""
    drill = DRILLS_BY_NAME[name]
    module = str(_drill_module(name).relative_to(REPO_ROOT))
    code = (design_doc.Links(site=True).code(module) if drill_module_exists(name)
            else f"`{module}` (not in this checkout yet)")
    answers = (f"It answers [hidden follow-up {drill.follow_up}](../answer-key.md#fu{drill.follow_up}). "
               if drill.follow_up else "")
    return (f"{answers}It shows that {drill.proves}.\n\n"
            "```bash\n"
            f"d2kit drill run {name}                     # full timings\n"
            f"d2kit drill run {name} --quick             # short timings, as make demo runs it\n"
            f"d2kit drill run {name} --quick --publish   # and publish the report to this page\n"
            "```\n\n"
            f"`--publish` copies the report (report.md, report.json, timeline.svg) to "
            f"`docs/drills/reports/{name}/`; the last one is shown at the bottom of this page. "
            f"Code: {code}.\n")


def drills_table() -> str:
    """All drills with the follow-up each answers and its last verdict."""
    rows = ["| Drill | Follow-up | What it shows | Last run |", "|---|---|---|---|"]
    for drill in design_doc.DRILLS:
        report = design_doc.read_drill_report(drill.name)
        last = (report.verdict or "report present") if report else "not run yet"
        follow_up = f"[{drill.follow_up}](../answer-key.md#fu{drill.follow_up})" if drill.follow_up else "—"
        rows.append(f"| [`{drill.name}`]({drill.name}.md) | {follow_up} | {drill.proves} | {last} |")
    return "\n".join(rows) + "\n"


def mutants_table() -> str:
    """The last full mutation-testing run (docs/drills/mutants.json): caught / total, and what caught each."""
    table = mutants.read_published()
    if table is None:
        return ('!!! note "No mutation run yet"\n\n'
                "    Run `make mutants` (or `d2kit drill mutants`); the table appears here.\n")
    lines = [f"**{table['caught']} / {table['total']} mutations caught** (drills in {table['mode']} mode).", "",
             "| Mutation | Guarantee it breaks | The bug | Must be caught by | Caught | What failed | Run |",
             "|---|---|---|---|---|---|---|"]
    for r in table["mutations"]:
        cells = (r["guarantee"], r["bug"], r["expected"], "yes" if r["caught"] else "**NO**", "; ".join(r["caught_by"]),
                 r["ran_at"][:10])
        lines.append(f"| `{r['mutation']}` | " + " | ".join(table_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def load_check_table() -> str:
    """`d2kit load check` as a table: every stated number against the latest measurement, with a verdict."""
    table = check.rows(results.latest())
    lines = ["| Figure | Stated | Measured | Verdict |", "|---|---|---|---|"]
    lines += [f"| {r.figure} | {r.stated} | {r.measured} | **{r.verdict}**"
              f"{f' (stale: {r.stale})' if r.stale else ''} |".replace("\n", " ") for r in table]
    return "\n".join(lines) + "\n"


def rubric() -> str:
    # The rubric's own top-level title would duplicate the page's.
    return (re.sub(r"\A# [^\n]*\n", "", render_rubric_markdown()) + "\n" + render_results_markdown() + "\n"
            + score_speed.render_markdown() + "\n" + render_diagram_results_markdown())


def model_answer() -> str:
    """The 45-minute answer under the reference design page's own heading: its title dropped, its sections one
    level down with anchors of their own (the full design below has the same section titles)."""
    body = re.sub(r"\A# [^\n]*\n", "", design_doc.render_model_answer(site=True))
    return re.sub(r"^## (\d)\. (.*)$", r"### \1. \2 { #answer-\1 }", body, flags=re.MULTILINE)


def full_design() -> str:
    """The full reference design, one heading level down, under the page's title."""
    return _demote_headings(design_doc.render_reference_design(site=True), 1)


def define_env(env) -> None:
    links = design_doc.Links(site=True)
    env.macro(full_design, "reference_design")
    env.macro(model_answer, "model_answer")
    env.macro(lambda: design_doc.render_answer_key(site=True), "answer_key")
    env.macro(lambda template: design_doc.render(template, site=True), "design_page")
    env.macro(links.code, "code")
    env.macro(links.drill, "drill")
    env.macro(links.diagram, "diagram")
    env.macro(drill_report, "drill_report")
    env.macro(drill_run, "drill_run")
    env.macro(drill_about, "drill_about")
    env.macro(drill_module_exists, "drill_module_exists")
    env.macro(drills_table, "drills_table")
    env.macro(rubric, "rubric")
    env.macro(load_check_table, "load_check_table")
    env.macro(mutants_table, "mutants_table")
    env.macro(second_questions_markdown, "second_questions")
    env.macro(calibration_markdown, "calibration")
    env.macro(cheatsheet_markdown, "cheatsheet")
    env.macro(glossary.glossary_markdown, "glossary")
    env.macro(alternatives_markdown, "alternatives")
    env.macro(samples.samples_index, "samples_index")
    env.macro(samples.sample_page, "sample_page")
