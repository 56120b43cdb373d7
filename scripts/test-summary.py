#!/usr/bin/env python3
"""Sum up meson's test logs into one closing line: 'N passed, N failed, N skipped'."""
import json
import sys

passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        print(f"test-summary: {path}: {e}", file=sys.stderr)
        failed += 1
        continue
    for line in lines:
        r = json.loads(line).get("result")
        if r in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif r == "SKIP":
            skipped += 1
        else:
            failed += 1
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
