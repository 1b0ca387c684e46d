"""scripts/clang_syntax_check.py, the CI's clang pass: it compiles with the build's own flags, and a
file clang warns about fails it."""
import importlib.util
import json
import pathlib
import shutil

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "clang_syntax_check.py"
spec = importlib.util.spec_from_file_location("clang_syntax_check", SCRIPT)
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_command_keeps_the_build_flags_and_makes_warnings_errors():
    entry = {"command": "ccache g++ -DX=1 -Icpp -Wall -Wextra -Wno-restrict -fno-semantic-interposition "
                        "-flto -fno-fat-lto-objects -MD -MF a.d -o a.o -c a.cpp"}
    command = check.clang_command(entry, "clang++")
    assert command[:3] == ["clang++", "-fsyntax-only", "-Werror"]
    assert command[3:] == ["-DX=1", "-Icpp", "-Wall", "-Wextra", "-flto", "a.cpp"]


@pytest.mark.skipif(shutil.which("clang++") is None, reason="clang++ is not installed (./dev.sh test installs it)")
def test_a_warning_fails_the_check(tmp_path, capsys):
    (tmp_path / "warns.cpp").write_text("int f() {\n  int unused = 0;\n  return 1;\n}\n")
    (tmp_path / "clean.cpp").write_text("int g() { return 1; }\n")
    entries = [{"directory": str(tmp_path), "file": str(tmp_path / name), "command": f"g++ -Wall -c {name} -o {name}.o"}
               for name in ("warns.cpp", "clean.cpp")]
    commands = tmp_path / "compile_commands.json"
    commands.write_text(json.dumps(entries))
    assert check.main([str(commands)]) == 1
    out = capsys.readouterr().out
    assert "warns.cpp failed" in out and "unused variable" in out
    assert "clean.cpp failed" not in out
    assert "1 of 2 C++ files compile" in out
