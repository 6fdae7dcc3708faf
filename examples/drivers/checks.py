"""The checks the Python driver programs share: one line per check, a count
at the end, and exit status 1 on any mismatch."""
import re
import sys

_count = {"checks": 0, "failures": 0}


def check(name, got, want):
    """Print "ok - name" when got equals want, "not ok - ..." otherwise."""
    _count["checks"] += 1
    if got == want:
        print(f"ok - {name}")
    else:
        _count["failures"] += 1
        print(f"not ok - {name}: got {got!r}, want {want!r}")


def check_envelopes(envelopes, small, large, full, driver, run, type_):
    """The envelopes of the NOTIFY route: the small one whole, the large one
    truncated (no payload) and whole once fetched with envelope_by_id."""
    check("notified both", sorted(envelopes), sorted([small, large]))
    envelope = envelopes.get(small, {})
    check("envelope keys", sorted(envelope), ["id", "occurredAt", "payload", "type"])
    check("envelope payload", envelope.get("payload"), {"driver": driver, "run": run})
    check("envelope type", envelope.get("type"), type_)
    check("occurredAt in toISOString form",
          bool(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z",
                            envelope.get("occurredAt", ""))), True)
    truncated = envelopes.get(large, {})
    check("large envelope truncated", (truncated.get("truncated"), "payload" in truncated),
          (True, False))
    check("envelope_by_id gives the payload", len(full["payload"]["note"]), 9000)


def finish(driver):
    """Print the count and exit: status 1 on any failed check."""
    print(f"{driver}: {_count['checks']} checks, {_count['failures']} failed")
    sys.exit(1 if _count["failures"] else 0)
