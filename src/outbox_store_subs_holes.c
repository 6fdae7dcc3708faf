/*-------------------------------------------------------------------------
 *
 * outbox_store_subs_holes.c
 *		The holes of a named subscription, looked at again by its claims
 *		(outbox_store_subs_claim.c): the appends that were in progress when
 *		a claim read past them, handed out once they commit, dropped once
 *		they roll back.
 *
 * A hole is a state row that no claim hands out.  Each claim, under the
 * subscription's lock, probes the stream for its holes (outbox_subs_scan.c):
 * a hole whose append committed becomes the message's row, leased at once
 * when it is due and its key's head; one whose append rolled back goes,
 * and its key's next message moves up, under the key's lock
 * (outbox_subs_keylock.c), which the claim only tries.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_spi.h"
#include "outbox_subs.h"
#include "outbox_subs_sink.h"

/* the first holes of a subscription: $1 sub_id, $2 how many, $3 from */
SAVED_STATEMENT(stmt_holes) = {
	"SELECT seq, id, ordering_key FROM outbox.subscription_state"
	" WHERE sub_id OPERATOR(pg_catalog.=) $1 AND hole AND seq OPERATOR(pg_catalog.>=) $3"
	" ORDER BY seq LIMIT $2",
	SPI_OK_SELECT, 3, {INT4OID, INT4OID, INT8OID}
};

/* holes whose append rolled back: $1 sub_id, $2 positions */
SAVED_STATEMENT(stmt_holes_gone) = {
	"WITH c AS (SELECT c.ctid FROM outbox.subscription_state c"
	"  WHERE c.sub_id OPERATOR(pg_catalog.=) $1 AND " SUBS_WITHIN("c.seq", "$2")
	"  AND c.seq OPERATOR(pg_catalog.=) ANY ($2) AND c.hole FOR UPDATE SKIP LOCKED)"
	" DELETE FROM outbox.subscription_state x"
	" WHERE x.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT c.ctid FROM c))"
	" RETURNING x.sub_id, x.ordering_key",
	SPI_OK_DELETE_RETURNING, 2, {INT4OID, INT8ARRAYOID}
};

/*
 * Holes whose append committed, handed out like fresh messages: $1
 * sub_id, $2 topic, $3 positions, $4 now, $5 lease end, $6 owner, $7 the
 * ids of their messages (looked up by id, see SUBS_LEASE_ROWS).  The rows
 * locked in r are updated by their ctids: with the statistics of an empty
 * table the planner read an index of the table whole for them, and under a
 * held snapshot that read grew by a millisecond a minute.
 */
SAVED_STATEMENT(stmt_holes_done) = {
	"WITH r AS (SELECT x.ctid, x.seq, " SUBS_DUE_AT("m") " AS available_at,"
	"   NOT x.blocked AND " SUBS_DUE_AT("m") " OPERATOR(pg_catalog.<=) $4 AS take"
	"  FROM outbox.subscription_state x JOIN outbox.message m ON m.id OPERATOR(pg_catalog.=) x.id"
	"  WHERE x.sub_id OPERATOR(pg_catalog.=) $1 AND " SUBS_WITHIN("x.seq", "$3")
	"  AND x.seq OPERATOR(pg_catalog.=) ANY ($3)"
	"  AND m.id OPERATOR(pg_catalog.=) ANY ($7)"
	"  AND x.hole ORDER BY x.seq FOR UPDATE OF x SKIP LOCKED),"
	" u AS (UPDATE outbox.subscription_state x SET hole = false,"
	"  available_at = CASE WHEN r.take THEN $5 ELSE r.available_at END,"
	"  attempts = CASE WHEN r.take THEN 1 ELSE 0 END,"
	"  leased_until = CASE WHEN r.take THEN $5 END,"
	"  lease_owner = CASE WHEN r.take THEN $6 END"
	"  FROM r WHERE x.ctid OPERATOR(pg_catalog.=) r.ctid"
	"  RETURNING x.id, x.attempts, x.leased_until, x.lease_owner)"
	SUBS_LEASED_MESSAGES("NULL::pg_catalog.text"),
	SPI_OK_SELECT, 7,
	{INT4OID, TEXTOID, INT8ARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID,
	 UUIDARRAYOID}
};

/*
 * Look again at the holes of the subscription from position from: hand
 * out those whose append committed (at most want), drop those that rolled
 * back.  Returns how many were leased; *changed says whether any hole was
 * handed out or dropped, *first is the first hole found (PG_INT64_MAX:
 * none).
 */
int
SubsClaimHoles(Datum sub, const ClaimRequest *req, TimestampTz lease_end,
			   int want, int64 from, SubsSink *sink, bool *changed,
			   int64 *first)
{
	Datum		args[7];
	Datum	   *done;
	Datum	   *done_ids;
	Datum	   *gone;
	Datum	   *ids;
	Datum	   *keys;
	int64	   *seqs;
	int		   *states;
	int			ndone = 0;
	int			ngone = 0;
	int			n;
	int			i;
	int64		last;

	/*
	 * Every hole (up to SUBS_MAX_HOLES) is looked at, not only the first
	 * want: one that stays open must not hold back those after it.
	 */
	args[0] = sub;
	args[1] = Int32GetDatum(SUBS_MAX_HOLES);
	args[2] = Int64GetDatum(from);
	*first = PG_INT64_MAX;
	n = (int) SpiExecute(&stmt_holes, args, NULL, false, 0);
	if (n == 0)
		return 0;
	seqs = palloc(sizeof(int64) * n);
	states = palloc(sizeof(int) * n);
	done = palloc(sizeof(Datum) * n);
	done_ids = palloc(sizeof(Datum) * n);
	gone = palloc(sizeof(Datum) * n);
	ids = palloc(sizeof(Datum) * n);
	keys = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		seqs[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
											  SPI_tuptable->tupdesc, 1, &isnull));
		ids[i] = datumCopy(SPI_getbinval(SPI_tuptable->vals[i],
										 SPI_tuptable->tupdesc, 2, &isnull),
						   false, UUID_LEN);
		keys[i] = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3,
								&isnull);
		keys[i] = isnull ? (Datum) 0 : PointerGetDatum(DatumGetTextPCopy(keys[i]));
	}
	*first = seqs[0];
	SubsProbeStream(req->topic, seqs, n, states);
	for (i = 0; i < n; i++)
	{
		if (states[i] == STREAM_COMMITTED && ndone < want)
		{
			done_ids[ndone] = ids[i];
			done[ndone++] = Int64GetDatum(seqs[i]);
		}
		else if (states[i] == STREAM_GONE &&
				 (keys[i] == (Datum) 0 ||
				  SubsKeyTryLock(DatumGetInt32(sub), DatumGetTextPP(keys[i]))))
			gone[ngone++] = Int64GetDatum(seqs[i]);
	}
	*changed = ngone > 0 || ndone > 0;
	if (ngone > 0)
	{
		args[1] = SubsArray(gone, NULL, ngone, INT8OID);
		if (SpiExecute(&stmt_holes_gone, args, NULL, false, 0) > 0)
			SubsPromoteReturned(1, 2, 0);
	}
	if (ndone == 0)
		return 0;
	args[1] = PointerGetDatum(req->topic);
	args[2] = SubsArray(done, NULL, ndone, INT8OID);
	/* due by the clock after the probe, as in the fresh read (below) */
	args[3] = TimestampTzGetDatum(Max(req->now, GetCurrentTimestamp()));
	args[4] = TimestampTzGetDatum(lease_end);
	args[5] = PointerGetDatum(req->owner);
	args[6] = SubsArray(done_ids, NULL, ndone, UUIDOID);
	(void) SpiExecute(&stmt_holes_done, args, NULL, false, 0);
	return SubsSinkRows(sink, &last);
}
