"""FLOWGRAD_ISA: the instruction-set level flowgrad's hand-vectorised CPU kernels run at
(kernels/common/cpu_dispatch.h), the machine's own or a lower one. ./dev.sh test runs the whole suite
again at each level below the machine's, and the kernels' tests on emulated CPUs; these tests check
the switch itself on any machine, and the level each emulated CPU gets."""
import importlib.util
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import flowgrad as fg
from conftest import EMULATED_CPUS, emulator_in, run_isolated

LEVELS = ("generic", "avx2", "avx512")


def import_with(level, emulator=None):
    """`import flowgrad` in a fresh interpreter with FLOWGRAD_ISA=level, under the emulator's command
    `emulator` (a list), by default FLOWGRAD_TEST_EMULATOR's (as run_isolated)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), FLOWGRAD_ISA=level)
    emulator = emulator_in(env) if emulator is None else emulator
    return subprocess.run([*emulator, sys.executable, "-c", "import flowgrad"], capture_output=True, text=True,
                          env=env, timeout=600 if emulator else 120)


def test_build_config_names_the_level_in_use_among_the_levels_this_machine_runs():
    config = fg.build_config()
    levels = config["isa_levels"]
    assert levels and levels == [level for level in LEVELS if level in levels]  # in order
    assert LEVELS.index(levels[-1]) - LEVELS.index(levels[0]) == len(levels) - 1  # no gaps
    assert config["isa"] == (os.environ.get("FLOWGRAD_ISA") or levels[-1])


@pytest.mark.parametrize("level", LEVELS)
def test_a_level_the_machine_runs_is_the_one_in_use(level):
    """Below avx512 the float32 products leave flowgrad's AVX-512 GEMM for the BLAS."""
    if level not in fg.build_config()["isa_levels"]:
        pytest.skip(f"this machine runs {', '.join(fg.build_config()['isa_levels'])}, not {level}")
    out = run_isolated("""
        c = fg.build_config()
        x = fg.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
        print(c["isa"], c["sgemm"], float(fg.nn.functional.gelu(x).sum()) > 0)
    """, env={"FLOWGRAD_ISA": level, "FLOWGRAD_SGEMM": "avx512"})
    assert out.split() == [level, "avx512" if level == "avx512" else "blas", "True"]


@pytest.mark.parametrize("level,core", [("generic", "Katmai"), ("avx2", "Haswell")])
def test_a_forced_level_holds_openblas_to_it_unless_openblas_coretype_says_otherwise(level, core):
    """Below avx512 the float32 GEMMs are OpenBLAS's: FLOWGRAD_ISA picks its kernel set too
    (OPENBLAS_CORETYPE=Prescott, which OpenBLAS reports as its SSE set "Katmai", or Haswell) for the
    moment the library loads, and leaves the variable as it found it."""
    config = fg.build_config()
    if level not in config["isa_levels"]:
        pytest.skip(f"this machine runs {', '.join(config['isa_levels'])}, not {level}")
    if config["blas_library"] != "libscipy_openblas.so":
        pytest.skip(f"the OpenBLAS bundled as scipy-openblas32 is not linked ({config['blas'] or 'no BLAS'})")
    show = "import os\nc = fg.build_config()\nprint(c['isa'], c['blas_core'], os.environ.get('OPENBLAS_CORETYPE'))"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env.update(PYTHONPATH=os.pathsep.join(p for p in sys.path if p), FLOWGRAD_ISA=level)
    done = subprocess.run([sys.executable, "-c", "import flowgrad as fg\n" + show], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [level, core, "None"]
    env["OPENBLAS_CORETYPE"] = "Sandybridge"  # the user's choice wins
    done = subprocess.run([sys.executable, "-c", "import flowgrad as fg\n" + show], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [level, "Sandybridge", "Sandybridge"]


@pytest.mark.parametrize("level", LEVELS)
def test_a_level_above_the_machines_fails_the_import_naming_the_machines_level(level):
    levels = fg.build_config()["isa_levels"]
    if level in levels:
        pytest.skip(f"this machine runs {level}")
    if LEVELS.index(level) < LEVELS.index(levels[0]):
        pytest.skip(f"{level} is below this build's baseline (a FLOWGRAD_NATIVE build)")
    done = import_with(level)
    assert done.returncode != 0
    assert f"FLOWGRAD_ISA='{level}' asks for more than this CPU runs: its level is '{levels[-1]}'" in done.stderr


def qemu_version():
    """qemu-x86_64's (major, minor) version, (0, 0) without it."""
    if shutil.which("qemu-x86_64") is None:
        return (0, 0)
    out = subprocess.run(["qemu-x86_64", "--version"], capture_output=True, text=True, timeout=60).stdout
    found = re.search(r"version (\d+)\.(\d+)", out)
    return (int(found[1]), int(found[2])) if found else (0, 0)


@pytest.mark.skipif(qemu_version() < (7, 2),
                    reason="no qemu-x86_64 7.2 or later (the first to emulate AVX2) to emulate other CPUs: "
                           "Debian 12's qemu-user, which ./dev.sh test installs")
@pytest.mark.parametrize("cpu", EMULATED_CPUS)
def test_an_emulated_cpu_runs_its_own_level_by_itself_and_no_higher_one(cpu):
    """On a CPU without AVX-512 (or without AVX), emulated: the import picks the CPU's level, and
    the bundled OpenBLAS its kernels, by themselves; the CPU's instructions compute a GELU and a
    product (an instruction above them would end the emulated process); asking for avx512 fails
    naming the CPU's level."""
    level, bundled = EMULATED_CPUS[cpu], fg.build_config()["blas_library"] == "libscipy_openblas.so"
    code = """
        c = fg.build_config()
        x = fg.tensor(np.linspace(-3, 3, 37, dtype=np.float32).reshape(1, 37))
        y = fg.nn.functional.gelu(x) @ fg.ones(37, 5)
        print(c["isa"], c["isa_levels"][-1], c["blas_core"], float(y.sum()))
    """
    out = run_isolated(code, env={"FLOWGRAD_TEST_EMULATOR": f"qemu-x86_64 -cpu {cpu}", "FLOWGRAD_ISA": ""})
    xs = np.linspace(-3, 3, 37)
    gelu = xs * 0.5 * (1 + np.vectorize(math.erf)(xs / math.sqrt(2)))
    *found, total = out.split()
    assert found[:2] == [level, level]
    assert found[2] == cpu.split("-")[0] or not bundled  # a system BLAS names its kernels its own way
    assert float(total) == pytest.approx(5 * gelu.sum(), rel=1e-5)
    done = import_with("avx512", emulator=("qemu-x86_64", "-cpu", cpu))
    assert done.returncode != 0
    assert f"FLOWGRAD_ISA='avx512' asks for more than this CPU runs: its level is '{level}'" in done.stderr


def test_an_unknown_level_fails_the_import():
    done = import_with("avx1024")
    assert done.returncode != 0
    assert "FLOWGRAD_ISA='avx1024' is not 'generic', 'avx2' or 'avx512'" in done.stderr


def test_the_level_is_the_machines_own_or_a_lower_one_whatever_the_machine():
    """The rule on pretend machines (fg._core._isa_for): what the import applies to this one."""
    isa_for = fg._core._isa_for
    assert isa_for("", "avx2") == "avx2"
    assert [isa_for(level, "avx512") for level in LEVELS] == list(LEVELS)
    assert isa_for("generic", "avx2") == "generic"
    with pytest.raises(ValueError, match="FLOWGRAD_ISA='avx512' asks for more than this CPU runs: its level is 'avx2'"):
        isa_for("avx512", "avx2")
    with pytest.raises(ValueError, match="FLOWGRAD_ISA='avx2' asks for more than this CPU runs: its level is 'generic'"):
        isa_for("avx2", "generic")
    with pytest.raises(ValueError, match="FLOWGRAD_ISA='generic' is below this build's baseline 'avx2'"):
        isa_for("generic", "avx512", "avx2")
    with pytest.raises(ValueError, match="FLOWGRAD_ISA='sse4' is not 'generic', 'avx2' or 'avx512'"):
        isa_for("sse4", "avx512")


def load_isa_spills():
    path = os.path.join(os.path.dirname(__file__), os.pardir, "scripts", "isa_spills.py")
    spec = importlib.util.spec_from_file_location("isa_spills", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_level_reaches_a_register_wider_than_its_own_in_the_built_module():
    """A forced level runs on a machine that has more (this one, in CI), where an AVX-512 instruction
    in the avx2 copy of a kernel would run and pass unnoticed, and fault on an AVX2 machine. So the
    disassembly is read instead: from each avx2 copy no zmm or mask register, from each generic copy
    no ymm or zmm, through every function it calls (scripts/isa_spills.py --widths)."""
    if shutil.which("objdump") is None or shutil.which("readelf") is None:
        pytest.skip("objdump and readelf (binutils) are not installed")
    if fg.build_config()["isa_levels"][0] != "generic":
        pytest.skip("a native build (FLOWGRAD_NATIVE=ON) compiles every function above generic")
    sections = subprocess.run(["readelf", "-S", fg._core.__file__], capture_output=True, text=True).stdout
    if ".symtab" not in sections:
        pytest.skip("the module is stripped: builds with FLOWGRAD_BUILD_TESTS=ON (./dev.sh) keep its symbols")
    isa_spills = load_isa_spills()
    found = isa_spills.functions(fg._core.__file__)
    checked = isa_spills.too_wide(found)
    for level, (copies, reached, bad) in checked.items():
        assert copies > 100 and reached >= copies, (level, copies, reached)  # the names still match
        assert bad == [], f"{level}: " + "; ".join(f"{isa_spills.shorten(n)}: {i}" for n, i in bad[:5])
    # the same regular expressions see the wider registers where they belong
    avx512 = [n for n in found if "isa_detail::at_avx512<" in n]
    assert any(isa_spills.ABOVE["avx2"].search(i) for n in avx512 for i in found[n][1])
    assert any(isa_spills.ABOVE["generic"].search(i) for n in found if "isa_detail::at_avx2<" in n
               for i in found[n][1])


def test_the_width_check_follows_calls_and_stops_at_the_higher_copies():
    isa_spills = load_isa_spills()
    found = {
        "decltype(auto) fg::isa_detail::at_avx2<k>()": (0x10, ["call   20 <helper>", "vaddps %ymm1,%ymm2,%ymm3"]),
        "helper": (0x20, ["jmp    30 <tail>"]),
        "tail": (0x30, ["vmovups %zmm0,(%rdi)"]),
        "decltype(auto) fg::at_isa<k>()": (0x40, ["call   50 <decltype(auto) fg::isa_detail::at_avx512<k>()>",
                                                  "call   60 <plain>"]),
        "decltype(auto) fg::isa_detail::at_avx512<k>()": (0x50, ["vaddps %zmm1,%zmm2,%zmm3"]),
        "plain": (0x60, ["kmovw  %k1,%eax"]),
    }
    checked = isa_spills.too_wide(found)
    assert checked["avx2"] == (1, 3, [("tail", "vmovups %zmm0,(%rdi)")])
    assert checked["generic"] == (1, 2, [("plain", "kmovw  %k1,%eax")])
