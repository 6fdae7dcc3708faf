/*-------------------------------------------------------------------------
 *
 * outbox_store_subs_due.c
 *		The reads of a named subscription's claim that lease the state rows
 *		it has already: the due read (retries, schedules, revivals and
 *		unblocked key heads), read on from where this backend's last full
 *		batch of them ended (SubsDueHint), and the look at leases that ran
 *		out.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/timestamp.h"

#include "outbox_spi.h"
#include "outbox_subs.h"
#include "outbox_subs_sink.h"

/*
 * Lease the rows of c (a CTE of positions) and return their messages:
 * $1 sub_id, $2 now, $3 batch, $4 lease end, $5 owner, $6 topic, $7 max
 * attempts.
 *
 * The rows are updated where c locked them (by ctid: a TID scan, the one
 * plan there is), the messages looked up by their ids as an array that
 * the primary key takes whole.  Joined to c and u instead, a generic plan
 * made while the tables were empty read every state row of the
 * subscription for each row of c, and the topic's whole stream for the
 * messages: on empty tables a read by subscription or by topic alone
 * looks as cheap as any (TAP 144: 20,000 index entries per claim once the
 * topic held 20,000 messages).  c is the rows' ctids.
 */
#define SUBS_LEASE_ROWS_AND(c, extra) \
	"WITH c AS (" c "), " \
	" u AS (UPDATE outbox.subscription_state x SET attempts = x.attempts OPERATOR(pg_catalog.+) 1," \
	"  leased_until = $4, lease_owner = $5, available_at = $4" \
	"  WHERE x.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT c.ctid FROM c))" \
	"  RETURNING x.id, x.attempts, x.leased_until, x.lease_owner, x.last_error)" \
	SUBS_LEASED_MESSAGES_AND("u.last_error", extra)
#define SUBS_LEASE_ROWS(c) SUBS_LEASE_ROWS_AND(c, "")

/*
 * The due read: retries, schedules, revivals and unblocked key heads, from
 * $8 on (SubsDueHint); each row returned ends with the last available_at
 * read (SUBS_COL_DUE_LAST).
 */
SAVED_STATEMENT(stmt_claim_due) = {
	SUBS_LEASE_ROWS_AND("SELECT c.ctid, c.available_at FROM outbox.subscription_state c"
						"  WHERE c.sub_id OPERATOR(pg_catalog.=) $1 AND c.dead_at IS NULL"
						"  AND NOT c.blocked AND NOT c.hole AND c.leased_until IS NULL"
						"  AND c.available_at OPERATOR(pg_catalog.<=) $2"
						"  AND c.available_at OPERATOR(pg_catalog.>=) $8"
						"  ORDER BY c.available_at LIMIT $3 FOR UPDATE SKIP LOCKED",
						", (SELECT pg_catalog.max(c.available_at) FROM c)"),
	SPI_OK_SELECT, 8,
	{INT4OID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TEXTOID, TEXTOID, INT4OID,
	 TIMESTAMPTZOID}
};
#define SUBS_COL_DUE_LAST	(SUBS_CLAIM_COLS + 1)

/*
 * Leases that ran out on an attempt before the last, taken over (those on
 * the last one are for stmt_dead_mark).
 */
SAVED_STATEMENT(stmt_claim_expired) = {
	SUBS_LEASE_ROWS("SELECT c.ctid FROM outbox.subscription_state c"
					"  WHERE c.sub_id OPERATOR(pg_catalog.=) $1 AND c.leased_until IS NOT NULL"
					"  AND c.dead_at IS NULL AND c.leased_until OPERATOR(pg_catalog.<=) $2"
					"  AND c.leased_until OPERATOR(pg_catalog.>) $8"
					"  AND c.attempts OPERATOR(pg_catalog.<) $7"
					"  ORDER BY c.leased_until LIMIT $3 FOR UPDATE SKIP LOCKED"),
	SPI_OK_SELECT, 8,
	{INT4OID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TEXTOID, TEXTOID, INT4OID,
	 TIMESTAMPTZOID}
};


/*
 * Whether subscription $1 has keyed rows not dead.  A due read passes a
 * key's rows behind its head, which are unblocked when the head leaves,
 * due as they were: a hint past them would leave each behind for a
 * second, and a key with a run of them would drain at one a second.  So
 * such a subscription's due reads take no hint.
 */
SAVED_STATEMENT(stmt_keyed_rows) = {
	"SELECT EXISTS (SELECT 1 FROM outbox.subscription_state k"
	"  WHERE k.sub_id OPERATOR(pg_catalog.=) $1 AND k.ordering_key IS NOT NULL"
	"  AND k.dead_at IS NULL)",
	SPI_OK_SELECT, 1, {INT4OID}
};

/*
 * Leases of a subscription that ran out, taken over into sink: args as
 * stmt_claim_expired's.  Returns how many were leased.
 */
int
SubsClaimExpired(Datum *args, SubsSink *sink)
{
	int64		last;

	(void) SpiExecute(&stmt_claim_expired, args, NULL, false, 0);
	return SubsSinkRows(sink, &last);
}

/*
 * The due read of subscription sub, args as stmt_claim_due's but $3 and
 * $8: up to want rows leased into sink, read on from this backend's hint,
 * or from the first due row when there is none or it is a second old.
 * Returns how many were leased.
 */
int
SubsClaimDue(int32 sub, const ClaimRequest *req, Datum *args, int want,
			 SubsSink *sink)
{
	bool		hinted;
	bool		held;
	TimestampTz read_last = DT_NOBEGIN;
	bool		isnull = true;
	bool		full;
	bool		keep;
	int64		last;
	int			n;

	args[7] = TimestampTzGetDatum(SubsDueHint(sub, req->now, &hinted, &held));
	args[2] = Int32GetDatum(want);
	(void) SpiExecute(&stmt_claim_due, args, NULL, false, 0);
	if (SPI_processed > 0)
		read_last = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
													  SPI_tuptable->tupdesc,
													  SUBS_COL_DUE_LAST, &isnull));
	n = SubsSinkRows(sink, &last);
	if (isnull)
		read_last = DT_NOBEGIN;
	full = n > 0 && n >= want;

	/* a hint set or kept past a key's rows would leave them behind */
	keep = full || held;
	if (keep && (full || !hinted) && SpiExecuteBool(&stmt_keyed_rows, args))
		keep = false;
	SubsDueHintNote(sub, req->now, hinted, keep, full, read_last);
	return n;
}
