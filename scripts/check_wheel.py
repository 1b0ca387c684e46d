"""Checks an installed flowgrad wheel the way a user's machine would use it: imports without a
system BLAS on its search path, multiplies with the bundled BLAS, ships no test binary, and
carries its license. Run with the scratch environment's Python, outside the source tree."""
import importlib.metadata
import pathlib

import numpy as np

import flowgrad as fg

package = pathlib.Path(fg.__file__).parent
assert package.parent.name == "site-packages", f"flowgrad imported from {package}, not the installed wheel"
assert not (package / "_cpp_tests").exists(), "the wheel ships the GoogleTest binary"
assert "scipy-openblas32" in fg.blas_name(), f"matmul uses {fg.blas_name()}, not the bundled OpenBLAS"
a, b = np.random.default_rng(0).standard_normal((2, 67, 67)).astype(np.float32)
np.testing.assert_allclose((fg.tensor(a) @ fg.tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
meta = importlib.metadata.metadata("flowgrad")
assert meta["License-Expression"] == "Apache-2.0", meta["License-Expression"]
print(f"wheel ok: flowgrad {meta['Version']} from {package}, BLAS {fg.blas_name()}, "
      f"files {sorted(p.name for p in package.iterdir() if p.suffix in ('.so', '.txt'))}")
