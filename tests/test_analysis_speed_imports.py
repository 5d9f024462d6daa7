"""What the analysis and the viewer import before they read a log: matplotlib only where something is
drawn (the drawing process imports it while the analysis reads the logs), scipy only by the first
interval. Each is a few tenths of a second of start-up that nothing else overlaps."""

import subprocess
import sys

import pytest

from tests.test_analysis_outputs import ROOT


def _imported_after(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sorted(m.split('.')[0] for m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return set(done.stdout.split())


@pytest.mark.parametrize("module", ["analysis.__main__", "analysis.view.page", "analysis.report.timeline"])
def test_importing_the_analysis_or_the_viewer_imports_no_matplotlib(module):
    assert "matplotlib" not in _imported_after(module)


def test_importing_the_analysis_imports_no_scipy():
    assert "scipy" not in _imported_after("analysis.__main__")


def test_the_drawing_process_imports_matplotlib_ahead_of_the_first_figure():
    code = (
        "import sys, analysis.__main__ as cli\n"
        "def drawn_ready():\n"
        "    return 'matplotlib.figure' in sys.modules\n"
        "with cli.drawing_process() as drawing:\n"
        "    print(drawing.submit(drawn_ready).result(), 'matplotlib.figure' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.split() == ["True", "False"]  # there, not here
