"""Every notebook in notebooks/ executes, in quick mode (CERTIFY_QUICK=1), on this interpreter's Python.

Notebooks are stored without outputs; a notebook that raises, or any cell that fails its own asserts, fails here.
The kernel is a temporary kernelspec pointing at sys.executable (the test's virtual environment), checked by an
extra cell appended at run time.
"""

from __future__ import annotations

import json
import pathlib
import sys

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
KERNEL = "certify-test-python"


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    return root


def test_the_four_notebooks_exist_without_outputs():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04"]
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        code = [c for c in notebook.cells if c.cell_type == "code"]
        assert code and all(not c.outputs and c.execution_count is None for c in code), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_in_quick_mode(path, kernel_dir, monkeypatch):
    monkeypatch.setenv("CERTIFY_QUICK", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_dir))
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.executable)"))
    client = NotebookClient(notebook, kernel_name=KERNEL, timeout=180, resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    printed = "".join(o.get("text", "") for o in notebook.cells[-1].outputs if o.output_type == "stream").strip()
    assert printed == sys.executable
