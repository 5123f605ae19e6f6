"""The rubric, the attempt scorer and the 45-minute practice mode (``d2kit score / practice / history``).

Where each idea lives (one place each):

==========================  =====================================================
rubric data (authority)     ``rubric/part1-process.yaml``, ``rubric/part2-design.yaml``
load + render to markdown   ``rubric.py`` (``render_rubric_markdown`` for the docs site)
attempt -> sections, units  ``document.py``; sentence or list of names: ``prose.py``
detectors                   ``arithmetic.py``, ``failures.py``, ``tradeoffs.py``, ``concepts.py``, ``altitude.py``
points + evidence           ``scorer.py`` (one detector per rubric check), ``evidence.py``
output                      ``report.py`` (rich, markdown, JSON); diagram check: ``diagram.py``
practice timer and reveal   ``practice.py`` + ``templates/attempt-d2.md.j2``
self-score, history         ``selfscore.py``, ``history.py``; commands: ``cli.py``
calibration                 ``rubric/calibration/*.md`` + ``bands.yaml``
==========================  =====================================================
"""
