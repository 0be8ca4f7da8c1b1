"""The reproduction behind ``rbfkmeans reproduce``: one module per claim (or group of claims).

* :mod:`.datasets`      -- blobs, moons, spirals, circles (seeded generators);
* :mod:`.collapse`      -- claims 1-3: collapse onto C*, rates, Gamma-convergence;
* :mod:`.gradient`      -- claim 4: the per-cluster gradient step is the Lloyd step;
* :mod:`.stability`     -- claim 5: low-temperature numerics (naive/stable softmax, entmax-1.5);
* :mod:`.critical`      -- claim 6: critical temperatures and the phase diagram;
* :mod:`.cost`          -- claim 7: time per sample of the mappings against k;
* :mod:`.followups`     -- claim 8: the interview question's follow-ups;
* :mod:`.trajectories`  -- claim 9: centroid paths through the annealing;
* :mod:`.runner`        -- runs them all, writes ``results.json``;
* :mod:`.plots`, :mod:`.report` -- figures and ``report.md`` drawn from ``results.json`` alone
  (:mod:`.findings` and :mod:`.findings_collapse`: the table of verdicts;
  :mod:`.report_collapse` and :mod:`.report_sections`: the text of the sections).
"""

from __future__ import annotations

from .runner import load_results, run_reproduction

__all__ = ["load_results", "run_reproduction"]
