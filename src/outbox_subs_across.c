/*-------------------------------------------------------------------------
 *
 * outbox_subs_across.c
 *		The claim of a named subscription across all topics: claim(owner,
 *		NULL, ..., subscription) takes from every subscription of that
 *		name that has something to hand out, in turn.
 *
 * One statement finds the subscriptions of the name that are neither
 * paused, expired nor delivered by a route and that have work: a due state
 * row, a lease that ran out, a hole to look at again, or a message of
 * their topic past their frontier.  Each is an index probe, so the cost
 * grows with the number of subscriptions of that name, not with what they
 * have read.  Each backend starts after the subscription it served last,
 * so that one busy topic does not starve the others.  Each subscription
 * is then claimed as a claim naming its topic would (outbox_store_subs_claim.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_spi.h"
#include "outbox_store_routes.h"
#include "outbox_subs.h"
#include "outbox_subs_sink.h"

/*
 * This backend's mark of subscription s in the arrays subs and marks, or
 * none (the lowest value of its type).
 */
#define SUBS_MARK_OF(subs, marks, none) \
	"COALESCE((SELECT k.mark FROM ROWS FROM (pg_catalog.unnest(" subs "), pg_catalog.unnest(" marks "))" \
	" AS k(sub, mark) WHERE k.sub OPERATOR(pg_catalog.=) s.sub_id), " none ")"

/*
 * $1 name, $2 now: the subscriptions of that name with work, by sub_id.
 * The table of subscriptions is small and has no index on the name alone:
 * bitmap scans are allowed (a scan of its index by topic and name), but
 * no sequential scan, which the planner took for the state rows when it
 * planned on empty tables, and every claim would then read them all.
 *
 * The holes, the frontier and the leases that ran out are read from this
 * backend's marks (outbox_subs_marks.c): $3 and $4 the subscriptions and
 * where their holes start, $5 and $6 where their first frontier row is,
 * $7 and $8 before when their leases that ran out were seen.  Under a held
 * snapshot those indexes keep an entry for every row deleted since, and
 * each claim would pass them all for every subscription of the name.
 */
#define SUBS_WITH_WORK(routed, leases) \
	"SELECT s.sub_id, s.topic FROM outbox.subscription s" \
	" WHERE s.name OPERATOR(pg_catalog.=) $1 AND s.expired_at IS NULL" \
	" AND (s.paused_until IS NULL OR s.paused_until OPERATOR(pg_catalog.<=) $2)" \
	routed \
	" AND (EXISTS (SELECT 1 FROM outbox.subscription_state x" \
	"   WHERE x.sub_id OPERATOR(pg_catalog.=) s.sub_id AND x.dead_at IS NULL" \
	"   AND NOT x.blocked AND NOT x.hole AND x.leased_until IS NULL" \
	"   AND x.available_at OPERATOR(pg_catalog.<=) $2" SUBPLAN_FENCE ")" \
	"  OR EXISTS (SELECT 1 FROM outbox.subscription_state x" \
	"   WHERE x.sub_id OPERATOR(pg_catalog.=) s.sub_id AND x.hole" \
	"   AND x.seq OPERATOR(pg_catalog.>=) " \
	SUBS_MARK_OF("$3", "$4", "'-9223372036854775808'::pg_catalog.int8") SUBPLAN_FENCE ")" \
	"  OR EXISTS (SELECT 1 FROM outbox.subscription_state x" \
	"   WHERE x.leased_until OPERATOR(pg_catalog.<=) $2 AND x.leased_until IS NOT NULL" \
	"   AND x.leased_until OPERATOR(pg_catalog.>) " \
	SUBS_MARK_OF("$7", "$8", "'-infinity'::pg_catalog.timestamptz") \
	"   AND x.dead_at IS NULL AND x.sub_id OPERATOR(pg_catalog.=) s.sub_id" SUBPLAN_FENCE ")" \
	leases \
	"  OR EXISTS (SELECT 1 FROM outbox.message m WHERE m.topic OPERATOR(pg_catalog.=) s.topic" \
	"   AND m.seq OPERATOR(pg_catalog.>=) (SELECT f.next_seq FROM outbox.subscription_frontier f" \
	"    WHERE f.sub_id OPERATOR(pg_catalog.=) s.sub_id AND f.next_seq OPERATOR(pg_catalog.>=) " \
	SUBS_MARK_OF("$5", "$6", "'-9223372036854775808'::pg_catalog.int8") \
	"    ORDER BY f.next_seq LIMIT 1)" SUBPLAN_FENCE "))" \
	" ORDER BY s.sub_id"

#define SUBS_WITH_WORK_TYPES \
	{TEXTOID, TIMESTAMPTZOID, INT4ARRAYOID, INT8ARRAYOID, INT4ARRAYOID, INT8ARRAYOID, \
	 INT4ARRAYOID, TIMESTAMPTZARRAYOID}

SAVED_STATEMENT(stmt_with_work) = {
	SUBS_WITH_WORK("", ""),
	SPI_OK_SELECT, 8, SUBS_WITH_WORK_TYPES, OBX_SCANS_INDEX_OR_BITMAP
};

/*
 * 1.5: not those a route delivers; and with leases by range that ran out
 * (outbox_subs_lease.c), seen as the state rows' leases are
 */
SAVED_STATEMENT(stmt_with_work_v15) = {
	SUBS_WITH_WORK(" AND NOT EXISTS (SELECT 1 FROM outbox.routes r"
				   "  WHERE r.topic OPERATOR(pg_catalog.=) s.topic"
				   "  AND r.subscription OPERATOR(pg_catalog.=) s.name)",
				   "  OR EXISTS (SELECT 1 FROM outbox.subscription_lease l"
				   "   WHERE l.leased_until OPERATOR(pg_catalog.<=) $2"
				   "   AND l.leased_until OPERATOR(pg_catalog.>) "
				   SUBS_MARK_OF("$7", "$8", "'-infinity'::pg_catalog.timestamptz")
				   "   AND l.sub_id OPERATOR(pg_catalog.=) s.sub_id" SUBPLAN_FENCE ")"),
	SPI_OK_SELECT, 8, SUBS_WITH_WORK_TYPES, OBX_SCANS_INDEX_OR_BITMAP
};

/* the subscription this backend's last claim across topics served */
static int32 last_served = 0;

/*
 * Lease up to req->batch_size messages (req->topic is NULL) of the
 * subscriptions named name of every topic into store, whose descriptor is
 * the row type of outbox.message.  Returns the number leased.
 */
int
SubsClaimAcross(const ClaimRequest *req, text *name, TupleDesc tupdesc,
				Tuplestorestate *store)
{
	MemoryContext caller = CurrentMemoryContext;
	Datum		args[8];
	Datum	   *msubs;
	Datum	   *marks;
	int			nmarks;
	int32	   *subs;
	text	  **topics;
	int			n;
	int			first = 0;
	int			got = 0;
	int			i;

	args[0] = PointerGetDatum(name);
	args[1] = TimestampTzGetDatum(req->now);
	nmarks = SubsHoleMarks(&msubs, &marks);
	args[2] = SubsArray(msubs, NULL, nmarks, INT4OID);
	args[3] = SubsArray(marks, NULL, nmarks, INT8OID);
	nmarks = SubsFrontierMarks(&msubs, &marks);
	args[4] = SubsArray(msubs, NULL, nmarks, INT4OID);
	args[5] = SubsArray(marks, NULL, nmarks, INT8OID);
	nmarks = SubsLeaseMarks(req->now, &msubs, &marks);
	args[6] = SubsArray(msubs, NULL, nmarks, INT4OID);
	args[7] = SubsArray(marks, NULL, nmarks, TIMESTAMPTZOID);
	SpiConnect();
	n = (int) SpiExecute(StoreRoutesPerSubscription() ? &stmt_with_work_v15 :
						 &stmt_with_work, args, NULL, false, 0);
	subs = MemoryContextAlloc(caller, sizeof(int32) * Max(n, 1));
	topics = MemoryContextAlloc(caller, sizeof(text *) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		HeapTuple	row = SPI_tuptable->vals[i];
		MemoryContext spi;
		Datum		topic;

		subs[i] = DatumGetInt32(SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull));
		topic = SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &isnull);
		spi = MemoryContextSwitchTo(caller);
		topics[i] = DatumGetTextPCopy(topic);
		MemoryContextSwitchTo(spi);
	}
	SpiFinish();

	/* start after the one served last */
	while (first < n && subs[first] <= last_served)
		first++;
	for (i = 0; i < n && got < req->batch_size; i++)
	{
		int			k = (first + i) % n;
		ClaimRequest one = *req;

		one.topic = topics[k];
		one.batch_size = req->batch_size - got;
		one.across = true;

		/*
		 * The first subscription's claim may wait for its lock, holding
		 * nothing yet; a later one's claim may hold rows of the ones
		 * before (leased, or locked by a due read), so it only tries the
		 * lock: waiting for it there could close a cycle with the holder,
		 * which may be waiting for one of those rows
		 * (outbox_store_subs_claim.c).
		 */
		one.no_wait = i > 0;
		got += SubsClaimToTuplestore(&one, name, tupdesc, store);
		last_served = subs[k];
	}
	return got;
}
