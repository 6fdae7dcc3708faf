// The checks the Node.js driver programs share: one line per check, a count
// at the end, and exit status 1 on any mismatch.
import { isDeepStrictEqual } from "node:util";

let checks = 0;
let failures = 0;

/** Print "ok - name" when got deep-equals want, "not ok - …" otherwise. */
export function check(name, got, want) {
  checks += 1;
  if (isDeepStrictEqual(got, want)) {
    console.log(`ok - ${name}`);
  } else {
    failures += 1;
    console.log(`not ok - ${name}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  }
}

/** The SQLSTATE a promise fails with, or "no error". */
export async function sqlstateOf(promise) {
  try {
    await promise;
    return "no error";
  } catch (error) {
    return error.code;
  }
}

/**
 * The envelopes of the NOTIFY route: the small one whole, the large one
 * truncated (no payload) and whole once fetched with envelope_by_id.
 */
export function checkEnvelopes(envelopes, small, large, full, driver, run, type) {
  check("notified both", Object.keys(envelopes).sort(), [small, large].sort());
  const envelope = envelopes[small] ?? {};
  check("envelope keys", Object.keys(envelope).sort(), ["id", "occurredAt", "payload", "type"]);
  check("envelope payload", envelope.payload, { driver, run });
  check("envelope type", envelope.type, type);
  check("occurredAt in toISOString form",
    new Date(envelope.occurredAt ?? 0).toISOString(), envelope.occurredAt);
  const truncated = envelopes[large] ?? {};
  check("large envelope truncated", [truncated.truncated, "payload" in truncated], [true, false]);
  check("envelope_by_id gives the payload", full?.payload?.note?.length, 9000);
}

/** Print the count and end the process: status 1 on any failed check. */
export function finish(driver) {
  console.log(`${driver}: ${checks} checks, ${failures} failed`);
  process.exit(failures ? 1 : 0);
}
