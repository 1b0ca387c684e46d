"""One closing line over pytest's JUnit reports: 'total: N passed, N failed, N skipped'.

    python scripts/test_summary.py build/pytest-*.xml
"""
import sys
import xml.etree.ElementTree as ET

passed = failed = skipped = 0
for path in sys.argv[1:]:
    for suite in ET.parse(path).getroot().iter("testsuite"):
        tests, fail, skip = (int(suite.get(k, 0)) for k in ("tests", "failures", "skipped"))
        fail += int(suite.get("errors", 0))
        print(f"{path}: {tests - fail - skip} passed, {fail} failed, {skip} skipped")
        passed, failed, skipped = passed + tests - fail - skip, failed + fail, skipped + skip
print(f"total: {passed} passed, {failed} failed, {skipped} skipped")
