"""The right altitude: all nine sections in sentences, the words spent on the hard parts, no code-level design."""

from __future__ import annotations

import re

from d2kit.scoring import concepts
from d2kit.scoring.document import Document, SectionText, Unit
from d2kit.scoring.evidence import Evidence, Finding, component, pattern
from d2kit.scoring.prose import is_name_drop

SUBSTANTIAL_WORDS = 25  # a section with fewer words of prose (or table) is "present but thin"
PROSE_SHARE_FULL = 0.6
PROSE_SHARE_PARTIAL = 0.35
SECTIONS_BEFORE_ALTITUDE_COUNTS = 5  # "not too low" is only meaningful for a document that exists

HARD_PART = pattern(r"\blease", r"\bfenc", r"\bclaim", r"dispatch", r"exactly[- ]once", r"at[- ]least[- ]once",
                    r"idempot", r"heartbeat", r"leader", r"double[- ]?(fire|dispatch)", r"duplicate",
                    r"split[- ]brain", r"materiali", r"misfire", r"\breaper\b", r"conditional (update|write)",
                    r"compare[- ]and[- ]swap", r"\block (row|holder)", r"worker (fail|death|dies|crash)", r"\brenew",
                    r"(two|second|racing) (planners?|schedulers?|replicas?|workers?|machines?|copies)")
# Not "retry" (the plumbing the rubric contrasts with the hard parts), nor a bare "expiry" (a JWT's expires too).
CODE_LEVEL = re.compile(r"^\s*(class|interface|struct|abstract class|enum)\s+\w+|\b(extends|implements)\s+\w+|"
                        r"^\s*(def|func|public|private|protected)\s+\w+", re.I | re.M)
CODE_LEVEL_PROSE = pattern(r"class hierarch", r"\bsubclass", r"inherits? from", r"abstract (base )?class",
                           r"base class", r"design pattern", r"\bfactory\b", r"\bvisitor\b", r"\bsingleton\b")


FRAGMENT_WEIGHT = 0.5  # a terse line with numbers or a mechanism says something; a line of names does not


def _substance(section: SectionText) -> int:
    fragments = [u for u in section.units if u.written and not u.prose]
    rows = sum(u.words for u in fragments if u.has_columns)  # a table cell is terse by nature
    terse = sum(u.words for u in fragments if not u.has_columns and not is_name_drop(u.text))
    return section.prose_words + rows + round(FRAGMENT_WEIGHT * terse)


def sections_present(doc: Document) -> Finding:
    result = Finding(0.0)
    for number in range(1, 10):
        section = doc.sections.get(number)
        if section is None:
            result.missing.append(f"section {number} is missing")
            continue
        words = _substance(section)
        if words == 0:
            result.missing.append(f"section {number} ({section.title}) is empty")
            continue
        result.evidence.append(Evidence(section.heading_line, f"§{number} {section.title}: {words} words"))
        if words >= SUBSTANTIAL_WORDS:
            result.fraction += 1 / 9
        else:
            result.fraction += 0.5 / 9
            result.missing.append(f"section {number} ({section.title}) is thin: {words} words of substance")
    result.fraction = round(result.fraction, 4)
    return result


def prose_not_names(doc: Document) -> Finding:
    written = [u for u in doc.content_units() if u.written]
    total = sum(u.words for u in written)
    if not total:
        return Finding(0.0, missing=["no written content"])
    share = sum(u.words for u in written if u.prose) / total
    fragments = [u for u in written if not u.prose]
    evidence = [Evidence(0, f"{share:.0%} of the words are in sentences")]
    missing = [f"fragment or list of names: line {u.first_line}: {u.text[:80]}" for u in fragments[:5]]
    fraction = 1.0 if share >= PROSE_SHARE_FULL else 0.5 if share >= PROSE_SHARE_PARTIAL else 0.0
    return Finding(fraction, evidence, missing if fraction < 1 else [])


def _words(doc: Document, *numbers: int) -> int:
    return sum(doc.sections[n].words for n in numbers if n in doc.sections)


# The rubric's "none": the deep dive is about the API or the UI. Screens, endpoints and request formats.
API_OR_UI = pattern(r"\b(console|dashboard|ui|screens?|pages?|buttons?|tabs?|badges?|charts?|widgets?|endpoints?|"
                    r"pagination|graphql|rest api|json body|request body|response body|status codes?)\b")


def _about_the_api_or_ui(doc: Document) -> bool:
    """Most of the deep dive's words are in items about screens and endpoints: one aside on dispatch is not a deep
    dive on it."""
    written = [u for u in doc.section_units(6) if u.written]
    surface = sum(u.words for u in written if API_OR_UI.search(u.text) and not HARD_PART.search(u.text))
    return surface * 2 > sum(u.words for u in written)


def _mechanism_explained(units: list[Unit]) -> Evidence | None:
    """A hard part explained with its roles in ``units``: a claim and what ends it, a token and who checks it, a
    double-fire guard and the replicas it stops. Naming a hard part ("exactly-once dispatch") is not time on it."""
    roles = ((concepts.LEASE, concepts.LIVENESS), (concepts.FENCING, concepts.FENCE_CHECK),
             (concepts.DOUBLE_FIRE_MECHANISM, concepts.REPLICAS), (concepts.CATCH_UP, concepts.PER_JOB_POLICY))
    found = next((f for mechanism, role in roles
                  if (f := component(units, mechanism, "", also=role)).fraction), None)
    return found.evidence[0] if found else None


def time_on_hard_parts(doc: Document) -> Finding:
    result = Finding(0.0)
    explained = _mechanism_explained([u for u in doc.section_units(6) if u.prose])
    if explained and not _about_the_api_or_ui(doc):
        result.fraction += 0.5
        result.evidence.append(explained)
    else:
        result.missing.append("the deep dive (section 6) explains no hard part with its roles (a claim and what "
                              "ends it, a token and who checks it, a double-fire guard and the replicas it stops)")
    hard, plumbing = _words(doc, 6, 7), _words(doc, 3, 4)
    if hard >= plumbing and hard >= 100:
        result.fraction += 0.5
        result.evidence.append(Evidence(0, f"sections 6-7: {hard} words; sections 3-4: {plumbing} words"))
    else:
        result.missing.append(f"sections 6-7 have {hard} words against {plumbing} for the API and data model")
    return result


def not_too_low(doc: Document) -> Finding:
    for block in doc.code_blocks:
        code = "\n".join(line.text for line in block.lines)
        match = CODE_LEVEL.search(code)
        if match:
            line = next(line for line in block.lines if match.group(0).strip() in line.text)
            return Finding(0.0, missing=[f"code-level design at line {line.number}: {line.text.strip()[:80]}"])
    for unit in doc.content_units():
        if CODE_LEVEL_PROSE.search(unit.text):
            # The rubric's partial: the design is still components and contracts, with some code-level detail.
            return Finding(0.5, [Evidence(0, "components and their contracts, apart from the code-level detail")],
                           [f"code-level design at line {unit.first_line}: {unit.text[:80]}"])
    substantial = sum(1 for s in doc.sections.values() if _substance(s) >= SUBSTANTIAL_WORDS)
    fraction = min(1.0, substantial / SECTIONS_BEFORE_ALTITUDE_COUNTS)
    missing = [] if fraction == 1 else [f"only {substantial} sections have substance to judge the altitude of"]
    return Finding(round(fraction, 4), [Evidence(0, "no class hierarchies or code-level design")], missing)
