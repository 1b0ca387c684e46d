"""atheris harness for the safetensors reader: any input must either parse or raise
fg.CheckpointError. Run: python fuzz_safetensors.py CORPUS_DIR -max_total_time=30"""
import sys

import atheris

with atheris.instrument_imports():
    import flowgrad as fg


def test_one_input(data):
    try:
        tensors, metadata = fg._core._parse_safetensors(data)
    except fg.CheckpointError:
        return
    for t in tensors.values():  # whatever parses must be usable
        t.numel()


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
