"""The mutation set is well-formed (the run itself, a minute per mutation, is `make mutants`, not `make test`).

Each mutation's text is in the current source exactly once, so a refactor cannot silently make one a no-op; each
guarantee the README makes has at least one; each names a drill invariant or a test that exists; and the table the
drills page shows is a run of this very set, every mutation caught.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from d2kit import paths
from d2kit.drills import DRILLS, mutants


@pytest.mark.parametrize("mutation", mutants.MUTATIONS, ids=lambda m: m.name)
def test_each_edit_finds_its_text_exactly_once_and_changes_the_source(mutation, tmp_path):
    for edit in mutation.edits:
        assert (paths.ROOT / edit.path).read_text(encoding="utf-8").count(edit.find) == 1, edit.find
        (tmp_path / edit.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(paths.ROOT / edit.path, tmp_path / edit.path)
    mutants.apply(tmp_path, mutation)  # the edits also apply one after another
    for edit in mutation.edits:
        assert edit.find not in (tmp_path / edit.path).read_text(encoding="utf-8") or edit.find in edit.replace


def test_apply_refuses_an_edit_whose_text_is_gone(tmp_path):
    (tmp_path / "f.sql").write_text("a = b\n")
    broken = mutants.Mutation("gone", mutants.FENCING, "nothing", (mutants.Edit("f.sql", "c = d", "true"),),
                              test="tests/x.py::t")
    with pytest.raises(ValueError, match="0 copies"):
        mutants.apply(tmp_path, broken)


def test_every_guarantee_the_readme_makes_has_a_mutation():
    readme = (paths.ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## What the design guarantees", 1)[1].split("\n## ", 1)[0]
    stated = [g.rstrip(".") for g in re.findall(r"^- \*\*(.+?)\*\*", section, flags=re.MULTILINE)]
    assert len(stated) == len(mutants.GUARANTEES)
    assert all(g.startswith(s) for g, s in zip(mutants.GUARANTEES, stated, strict=True))
    covered = {m.guarantee for m in mutants.MUTATIONS}
    assert not set(mutants.GUARANTEES) - covered, "a guarantee without a mutation"


def test_names_are_unique_and_each_names_a_catcher_that_exists():
    assert len(mutants.BY_NAME) == len(mutants.MUTATIONS)
    for m in mutants.MUTATIONS:
        assert (m.drill is None) != (m.test is None), m.name
        if m.test:
            path, test = m.test.split("::")
            assert f"def {test}(" in (paths.ROOT / path).read_text(encoding="utf-8"), m.test
            continue
        assert m.drill in DRILLS and m.invariant, m.name
        published = json.loads((paths.DRILL_PUBLISH_DIR / m.drill / "report.json").read_text(encoding="utf-8"))
        names = [i["name"] for i in published["invariants"]]
        assert any(n.startswith(m.invariant) for n in names), f"{m.name}: no invariant of {m.drill} starts " \
                                                              f"{m.invariant!r} (published: {names})"


def test_the_published_table_is_a_run_of_this_set_with_every_mutation_caught():
    table = mutants.read_published()
    assert table is not None, "run `make mutants` and commit docs/drills/mutants.json"
    published = [(r["mutation"], r["guarantee"], r["expected"]) for r in table["mutations"]]
    assert published == [(m.name, m.guarantee, m.catcher) for m in mutants.MUTATIONS], \
        "the mutation set changed since the published run: run `make mutants` (or the changed ones) again"
    assert table["total"] == len(mutants.MUTATIONS)
    assert table["caught"] == table["total"] == sum(r["caught"] for r in table["mutations"])


def test_a_run_of_some_mutations_replaces_only_their_rows(tmp_path):
    path = tmp_path / "mutants.json"
    first, second = mutants.MUTATIONS[:2]
    row = {"mutation": first.name, "caught": True, "ran_at": "2026-01-01T00:00:00+00:00"}
    mutants.publish([row, {"mutation": "no-longer-in-the-set", "caught": True}], path)
    written = mutants.publish([{"mutation": second.name, "caught": False}], path)
    assert [r["mutation"] for r in written["mutations"]] == [first.name, second.name]  # the set's order
    assert written["mutations"][0] == row and (written["caught"], written["total"]) == (1, 2)
    assert json.loads(path.read_text()) == written
