"""The README's demos and the notebooks run and reach their targets."""
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run(script, *args, timeout=300, cwd=None):
    result = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], capture_output=True, text=True,
                            timeout=timeout, cwd=cwd)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def test_digits_demo_reaches_97_percent(tmp_path):
    pytest.importorskip("sklearn")
    out = run("train_digits.py", cwd=tmp_path)  # writes into runs/train_digits/ of the working directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
    out_dir = tmp_path / "runs" / "train_digits"
    accuracy = float(re.search(r"test accuracy: ([0-9.]+)", out).group(1))
    assert accuracy >= 0.97, out
    epochs = re.findall(r"^epoch (\d+)/60  loss [0-9.]+  val_loss [0-9.]+  val_accuracy [0-9.]+  \(", out, re.M)
    assert epochs and epochs == [str(i) for i in range(1, len(epochs) + 1)], out
    if len(epochs) < 60:
        assert "validation loss stalled" in out
    csv_lines = (out_dir / "metrics.csv").read_text().splitlines()
    assert csv_lines[0] == "epoch,loss,val_loss,val_accuracy" and len(csv_lines) == len(epochs) + 1
    html = (out_dir / "training.html").read_text()
    assert "<svg" in html and "val_loss" in html
    assert (out_dir / "digits.safetensors").exists()


def test_char_transformer_learns_and_samples():
    out = run("char_transformer.py", "--steps", "60", "--chars", "50000")
    losses = [float(v) for v in re.findall(r"loss ([0-9.]+)", out)]
    assert losses[-1] < losses[0] - 1.0, out
    assert "sample:\nThe " in out


def test_generate_example_trains_and_streams():
    out = run("generate.py", "--steps", "50", "--tokens", "40", "--chars", "50000")
    losses = [float(v) for v in re.findall(r"loss ([0-9.]+)", out)]
    assert losses[-1] < losses[0] - 1.0, out
    sample = out.split("sample:\n", 1)[1].split("\n40 tokens in", 1)[0]
    assert sample.startswith("The ") and len(sample) == 4 + 40, out


@pytest.mark.parametrize("notebook", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_notebook_runs(notebook):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "notebooks" / notebook, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
