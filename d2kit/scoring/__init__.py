"""The rubric, the attempt scorer and the 45-minute practice mode (``d2kit score / practice / history``).

Where each idea lives (one place each):

==========================  =====================================================
rubric data (authority)     ``rubric/part1-process.yaml``, ``rubric/part2-design.yaml``, ``rubric/part3-diagram.yaml``
load + render to markdown   ``rubric.py`` (``render_rubric_markdown`` for the docs site)
attempt -> sections, units  ``document.py``; sentence or list of names: ``prose.py``
detectors                   ``arithmetic.py``, ``failures.py``, ``tradeoffs.py``, ``concepts.py``, ``altitude.py``
points + evidence           ``scorer.py`` (one detector per rubric check), ``evidence.py``
output                      ``report.py`` (rich, markdown, JSON)
diagram (Part 3)            ``scene.py`` (Excalidraw -> boxes, arrows), ``components.py`` (open vocabulary),
                            ``diagram.py`` (the checks), ``export_check.py`` (the PNG is the scene's export)
round (document + diagram   ``round_grade.py``; rendered by ``round_report.py``
+ process)
practice timer and reveal   ``practice.py`` + ``templates/attempt-d2.md.j2``
process (Part 1)            ``round_record.py`` (saves on the practice clock), ``process.py`` (observed
                            levels), ``phase_timeline.py`` (the budget against what was done)
self-score, history         ``selfscore.py``, ``history.py``; commands: ``cli.py``
calibration                 ``rubric/calibration/*.md`` + ``bands.yaml``; diagrams:
                            ``rubric/calibration/diagrams/`` (``calibration_split.py``, ``diagram_calibration.py``)
==========================  =====================================================
"""
