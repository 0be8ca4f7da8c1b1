"""The README's Python session is executed as a doctest: its printed outputs must stay true."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_session_runs_as_shown() -> None:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    session = "\n".join(b for b in blocks if b.lstrip().startswith(">>>"))
    assert session.count(">>>") >= 10  # the session is there
    parser = doctest.DocTestParser()
    test = parser.get_doctest(session, {}, "README", str(README), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} README example(s) print something else"
