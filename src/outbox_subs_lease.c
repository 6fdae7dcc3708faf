/*-------------------------------------------------------------------------
 *
 * outbox_subs_lease.c
 *		Leases by range: the fresh messages without an ordering key that a
 *		claim of a named subscription leases (outbox_store_subs_claim.c)
 *		are kept as one row of outbox.subscription_lease for each read of
 *		the log, not as a state row each.  Here: their completion, and
 *		their turning into state rows for everything else.
 *
 * A claim of a batch of fresh messages so writes one row, and the
 * completion of the batch deletes it: under a held snapshot, which keeps
 * every row version written since, a message costs its subscription a
 * share of one row, not a state row inserted and deleted with three index
 * entries.  A failure, an extended or released lease and a lease that ran
 * out are rare, and the code that handles them knows state rows: the
 * leases of the row concerned become state rows first, as the claim would
 * have written them (attempt 1, leased by the row's owner until its
 * lease's end), and the row goes.  So a message is in a lease row or in a
 * state row, never both, and a state row's rules hold for it from then on.
 *
 * A row is found from a message by the message's position: the row of its
 * subscription with the greatest first_seq not after it, whose seqs
 * holds it (the reads of a subscription's log never overlap).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/timestamp.h"

#include "outbox_spi.h"
#include "outbox_subs.h"

/*
 * The lease rows that owner $3 holds on the messages $1 (uuid[]), in the
 * subscriptions named $2: their keys and the positions of those messages.
 */
#define LEASES_OF_IDS \
	"c AS MATERIALIZED (SELECT l.sub_id, l.first_seq, m.seq" \
	"  FROM outbox.message m" \
	"  JOIN outbox.subscription s ON s.topic OPERATOR(pg_catalog.=) m.topic" \
	"   AND s.name OPERATOR(pg_catalog.=) $2" \
	"  CROSS JOIN LATERAL (SELECT y.sub_id, y.first_seq, y.seqs, y.lease_owner" \
	"   FROM outbox.subscription_lease y" \
	"   WHERE y.sub_id OPERATOR(pg_catalog.=) s.sub_id" \
	"   AND y.first_seq OPERATOR(pg_catalog.<=) m.seq" \
	"   ORDER BY y.first_seq DESC LIMIT 1) l" \
	"  WHERE m.id OPERATOR(pg_catalog.=) ANY ($1)" \
	"  AND l.lease_owner OPERATOR(pg_catalog.=) $3" \
	"  AND m.seq OPERATOR(pg_catalog.=) ANY (l.seqs))"

/*
 * Complete: a row whose every message is completed goes, the others keep
 * the rest.  Returns how many messages were completed.
 */
SAVED_STATEMENT(stmt_complete) = {
	"WITH " LEASES_OF_IDS ","
	" g AS (SELECT c.sub_id, c.first_seq, pg_catalog.array_agg(c.seq) AS done"
	"  FROM c GROUP BY c.sub_id, c.first_seq),"
	" d AS (DELETE FROM outbox.subscription_lease x USING g"
	"  WHERE x.sub_id OPERATOR(pg_catalog.=) g.sub_id"
	"  AND x.first_seq OPERATOR(pg_catalog.=) g.first_seq"
	"  AND x.lease_owner OPERATOR(pg_catalog.=) $3"
	"  AND x.seqs OPERATOR(pg_catalog.<@) g.done"
	"  RETURNING x.sub_id, x.first_seq),"
	" u AS (UPDATE outbox.subscription_lease x SET seqs = ARRAY("
	"   SELECT q.seq FROM pg_catalog.unnest(x.seqs) AS q(seq)"
	"   WHERE q.seq OPERATOR(pg_catalog.<>) ALL (g.done) ORDER BY q.seq)"
	"  FROM g WHERE x.sub_id OPERATOR(pg_catalog.=) g.sub_id"
	"  AND x.first_seq OPERATOR(pg_catalog.=) g.first_seq"
	"  AND x.lease_owner OPERATOR(pg_catalog.=) $3"
	"  AND NOT x.seqs OPERATOR(pg_catalog.<@) g.done"
	"  RETURNING x.sub_id, x.first_seq)"
	" SELECT pg_catalog.count(*) FROM c"
	" WHERE (c.sub_id, c.first_seq) IN (SELECT d.sub_id, d.first_seq FROM d"
	"  UNION ALL SELECT u.sub_id, u.first_seq FROM u)",
	SPI_OK_SELECT, 3, {UUIDARRAYOID, TEXTOID, TEXTOID}
};

/*
 * The leases of the rows deleted (the CTE l) become state rows, with the
 * messages' ids and keys from the log.
 */
#define LEASES_TO_STATE \
	" INSERT INTO outbox.subscription_state (sub_id, seq, id, ordering_key," \
	"  available_at, blocked, hole, attempts, leased_until, lease_owner)" \
	" SELECT l.sub_id, m.seq, m.id, m.ordering_key, l.leased_until, false, false, 1," \
	"  l.leased_until, l.lease_owner" \
	" FROM l JOIN outbox.subscription s ON s.sub_id OPERATOR(pg_catalog.=) l.sub_id" \
	" CROSS JOIN LATERAL pg_catalog.unnest(l.seqs) AS q(seq)" \
	" JOIN outbox.message m ON m.topic OPERATOR(pg_catalog.=) s.topic" \
	"  AND m.seq OPERATOR(pg_catalog.=) q.seq"

/* the rows that owner $3 holds on the messages $1 of subscriptions $2 */
SAVED_STATEMENT(stmt_to_state) = {
	"WITH " LEASES_OF_IDS ","
	" l AS (DELETE FROM outbox.subscription_lease x"
	"  USING (SELECT DISTINCT c.sub_id, c.first_seq FROM c) g"
	"  WHERE x.sub_id OPERATOR(pg_catalog.=) g.sub_id"
	"  AND x.first_seq OPERATOR(pg_catalog.=) g.first_seq"
	"  AND x.lease_owner OPERATOR(pg_catalog.=) $3"
	"  RETURNING x.sub_id, x.lease_owner, x.leased_until, x.seqs)"
	LEASES_TO_STATE,
	SPI_OK_INSERT, 3, {UUIDARRAYOID, TEXTOID, TEXTOID}
};

/*
 * The rows of subscription $1 whose lease ended at or before $2 and after
 * $3 (leases that ended before were seen by an earlier look), but not
 * those another transaction holds now: a completion, which a later look
 * sees through.
 */
SAVED_STATEMENT(stmt_expired_to_state) = {
	"WITH l AS (DELETE FROM outbox.subscription_lease x"
	"  WHERE x.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
	"   SELECT y.ctid FROM outbox.subscription_lease y"
	"   WHERE y.leased_until OPERATOR(pg_catalog.<=) $2"
	"   AND y.leased_until OPERATOR(pg_catalog.>) $3"
	"   AND y.sub_id OPERATOR(pg_catalog.=) $1 FOR UPDATE SKIP LOCKED))"
	"  RETURNING x.sub_id, x.lease_owner, x.leased_until, x.seqs)"
	LEASES_TO_STATE,
	SPI_OK_INSERT, 3, {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/* Is outbox.subscription_lease there (the tables of 1.5)? */
bool
SubsLeaseRows(void)
{
	return SubsHasTable("subscription_lease");
}

static int
obx_uuid_cmp(const void *a, const void *b)
{
	return memcmp(a, b, UUID_LEN);
}

/*
 * The ids of the n messages ids (a uuid[]) that are not among the ids in
 * column col of SPI_tuptable, as a uuid[]: those a completion looks up in
 * the lease rows after the state rows completed the others.
 */
Datum
SubsLeaseIdsLeft(Datum ids, int n, int col)
{
	uint64		ndone = SPI_processed;
	pg_uuid_t  *done = palloc(sizeof(pg_uuid_t) * Max(ndone, 1));
	Datum	   *elems;
	bool	   *nulls;
	Datum	   *left = palloc(sizeof(Datum) * Max(n, 1));
	int			nelems;
	int			nleft = 0;
	uint64		i;
	int			j;

	for (i = 0; i < ndone; i++)
	{
		bool		isnull;

		done[i] = *DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[i],
											   SPI_tuptable->tupdesc, col, &isnull));
	}
	qsort(done, ndone, sizeof(pg_uuid_t), obx_uuid_cmp);
	deconstruct_array(DatumGetArrayTypeP(ids), UUIDOID, UUID_LEN, false, TYPALIGN_CHAR,
					  &elems, &nulls, &nelems);
	for (j = 0; j < nelems; j++)
		if (!nulls[j] &&
			bsearch(DatumGetUUIDP(elems[j]), done, ndone, sizeof(pg_uuid_t),
					obx_uuid_cmp) == NULL)
			left[nleft++] = elems[j];
	return PointerGetDatum(construct_array(left, nleft, UUIDOID, UUID_LEN, false,
										   TYPALIGN_CHAR));
}

/*
 * Complete the messages ids (a uuid[]) that owner leased by range in the
 * subscriptions named name.  Returns how many.  Runs inside the caller's
 * SPI connection.
 */
int64
SubsLeaseComplete(Datum ids, text *owner, text *name)
{
	Datum		args[3];
	Datum		n;
	bool		isnull;

	args[0] = ids;
	args[1] = PointerGetDatum(name);
	args[2] = PointerGetDatum(owner);
	if (SpiExecute(&stmt_complete, args, NULL, false, 1) == 0)
		return 0;
	n = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : DatumGetInt64(n);
}

/*
 * The leases by range that owner holds on ids (a uuid[]) in the
 * subscriptions named name become state rows, with those of the other
 * messages of their rows.  Returns how many state rows were written.
 * Runs inside the caller's SPI connection.
 */
int64
SubsLeaseToState(Datum ids, text *owner, text *name)
{
	Datum		args[3];

	args[0] = ids;
	args[1] = PointerGetDatum(name);
	args[2] = PointerGetDatum(owner);
	return (int64) SpiExecute(&stmt_to_state, args, NULL, false, 0);
}

/*
 * The leases by range of subscription sub that ended at or before now and
 * after low become state rows: their lease ran out, and the claim's look
 * for leases that ran out takes them over or makes them dead.  Returns how
 * many.  Runs inside the caller's SPI connection.
 */
int64
SubsLeaseExpiredToState(int32 sub, TimestampTz now, TimestampTz low)
{
	Datum		args[3];

	args[0] = Int32GetDatum(sub);
	args[1] = TimestampTzGetDatum(now);
	args[2] = TimestampTzGetDatum(low);
	return (int64) SpiExecute(&stmt_expired_to_state, args, NULL, false, 0);
}
