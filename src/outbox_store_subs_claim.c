/*-------------------------------------------------------------------------
 *
 * outbox_store_subs_claim.c
 *		The claim of a named subscription: the messages whose last allowed
 *		lease ran out made dead, then the due read (retries, schedules,
 *		expired leases, unblocked key heads), then the fresh read of the
 *		topic's log from the subscription's frontier up to the
 *		horizon of appends still in progress.
 *
 * The fresh read takes the subscription's lock and reads on from its
 * frontier (outbox_subs_frontier.c), which records each range read: two
 * claimers never read one range of the log, and a range whose claim
 * rolls back is read again.  A claim releases the lock once its rows are
 * in (SUBS_RELEASE_BEFORE_COMMIT).  The messages read that are due and
 * their key's head are leased at once, in one lease row (with the tables
 * of 1.5; a row of outbox.subscription_key for each key among them, see
 * outbox_subs_lease.c), the others get a state row, waiting for their
 * available_at or behind their key; the claim holds the lock of each key
 * it adds a row to until it ends, and stops reading before a message whose
 * key another transaction holds (outbox_subs_keylock.c).  The due read and
 * the look at leases that ran out (outbox_store_subs_due.c) lease rows
 * that are there, skipping those another claim holds; they need no lock,
 * but a claim takes the subscription's lock before them or never waits
 * for it (see obx_subs_claim).
 *
 * The log is read with a dirty snapshot (outbox_subs_scan.c) below the gap
 * horizon (outbox_gap.c), so the frontier passes appends still in
 * progress: each becomes a hole, a state row that no claim hands out,
 * looked at again by later claims (first thing in each, under the same
 * lock) until its append commits (then it is handed out like a fresh
 * message) or rolls back (then it goes).  An appender that does not
 * commit, or a prepared transaction, holds back its own messages and the
 * later ones of their ordering keys, nothing else.  The horizon exists
 * only when the library is preloaded; a claim of a named subscription
 * without it is refused (outbox_api_subs.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_spi.h"
#include "outbox_store_routes.h"
#include "outbox_stream.h"
#include "outbox_subs.h"
#include "outbox_subs_sink.h"

/* at most this many reads of the log per claim (keys and schedules skipped) */
#define SUBS_FRESH_READS	4

/*
 * Whether a claim lets the next claim of its subscription read on before
 * it commits (see obx_claim_fresh): on.
 */
#define SUBS_RELEASE_BEFORE_COMMIT	true

SAVED_STATEMENT(stmt_find) = {
	"SELECT sub_id, paused_until, expired_at, false FROM outbox.subscription"
	" WHERE topic OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
	SPI_OK_SELECT, 2, {TEXTOID, TEXTOID}
};

/* 1.5: and whether a route delivers it */
SAVED_STATEMENT(stmt_find_v15) = {
	"SELECT s.sub_id, s.paused_until, s.expired_at, EXISTS (SELECT 1 FROM outbox.routes r"
	"  WHERE r.topic OPERATOR(pg_catalog.=) s.topic"
	"  AND r.subscription OPERATOR(pg_catalog.=) s.name" SUBPLAN_FENCE ")"
	" FROM outbox.subscription s"
	" WHERE s.topic OPERATOR(pg_catalog.=) $1 AND s.name OPERATOR(pg_catalog.=) $2",
	SPI_OK_SELECT, 2, {TEXTOID, TEXTOID}
};

/* $1 sub_id, $2 now, $3 max attempts, $4 low */
#define SUBS_LAST_LEASE_OVER \
	"c.sub_id OPERATOR(pg_catalog.=) $1 AND c.leased_until IS NOT NULL" \
	"  AND c.dead_at IS NULL AND c.leased_until OPERATOR(pg_catalog.<=) $2" \
	"  AND c.leased_until OPERATOR(pg_catalog.>) $4" \
	"  AND c.attempts OPERATOR(pg_catalog.>=) $3"
SAVED_STATEMENT(stmt_dead_mark) = {
	"WITH c AS (SELECT c.ctid FROM outbox.subscription_state c"
	"  WHERE " SUBS_LAST_LEASE_OVER
	"  AND (c.ordering_key IS NULL"
	"   OR (c.ordering_key COLLATE pg_catalog.\"C\") OPERATOR(pg_catalog.=) ANY ($5))"
	"  ORDER BY c.leased_until FOR UPDATE SKIP LOCKED)"
	" UPDATE outbox.subscription_state x SET dead_at = $2, leased_until = NULL, lease_owner = NULL,"
	" last_error = pg_catalog.format('lease of owner \"%s\" expired on attempt %s of %s',"
	"  x.lease_owner, x.attempts, $3)"
	" WHERE x.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT c.ctid FROM c))"
	" RETURNING x.sub_id, x.ordering_key",
	SPI_OK_UPDATE_RETURNING, 5,
	{INT4OID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TEXTARRAYOID}
};

/* the keys of the rows stmt_dead_mark would make dead (same arguments) */
SAVED_STATEMENT(stmt_dead_keys) = {
	"SELECT DISTINCT c.ordering_key FROM outbox.subscription_state c"
	" WHERE " SUBS_LAST_LEASE_OVER " AND c.ordering_key IS NOT NULL",
	SPI_OK_SELECT, 4, {INT4OID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID}
};

/* whether stmt_dead_mark (same arguments) has a row to make dead */
SAVED_STATEMENT(stmt_dead_any) = {
	"SELECT EXISTS (SELECT 1 FROM outbox.subscription_state c"
	"  WHERE " SUBS_LAST_LEASE_OVER ")",
	SPI_OK_SELECT, 4, {INT4OID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID}
};

/*
 * Is anything of subscription $1 due at $2 for the due read (from $6, where
 * it would start: SubsDueHint), or (when $3, the look at leases that ran
 * out) for that look ($4 low, $5 max attempts)?  Read without a lock.
 */
#define DUE_NOW(leases) { \
	"SELECT EXISTS (SELECT 1 FROM outbox.subscription_state c" \
	"  WHERE c.sub_id OPERATOR(pg_catalog.=) $1 AND c.dead_at IS NULL" \
	"  AND NOT c.blocked AND NOT c.hole AND c.leased_until IS NULL" \
	"  AND c.available_at OPERATOR(pg_catalog.<=) $2" \
	"  AND c.available_at OPERATOR(pg_catalog.>=) $6)" \
	" OR ($3 AND EXISTS (SELECT 1 FROM outbox.subscription_state c" \
	"  WHERE c.sub_id OPERATOR(pg_catalog.=) $1 AND c.leased_until IS NOT NULL" \
	"  AND c.dead_at IS NULL AND c.leased_until OPERATOR(pg_catalog.<=) $2" \
	"  AND c.leased_until OPERATOR(pg_catalog.>) $4" \
	"  AND c.attempts OPERATOR(pg_catalog.<) $5))" leases, \
	SPI_OK_SELECT, 6, \
	{INT4OID, TIMESTAMPTZOID, BOOLOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID} }
SAVED_STATEMENT(stmt_due_now_v14) = DUE_NOW("");
/* 1.5: or a lease by range that ran out */
SAVED_STATEMENT(stmt_due_now) = DUE_NOW(
	" OR ($3 AND EXISTS (SELECT 1 FROM outbox.subscription_lease l"
	"  WHERE l.leased_until OPERATOR(pg_catalog.<=) $2"
	"  AND l.leased_until OPERATOR(pg_catalog.>) $4"
	"  AND l.sub_id OPERATOR(pg_catalog.=) $1))");

/*
 * Run stmt_dead_any (!mark: whether a lease that ran out on its last
 * attempt is there to make dead) or stmt_dead_mark (mark: make them dead,
 * free their keys; the caller holds the subscription's lock).  A keyed
 * row is made dead only when its key's lock is free now
 * (outbox_subs_keylock.c); the others wait for a later claim.
 */
static bool
obx_dead(Datum sub, const ClaimRequest *req, TimestampTz low, bool mark)
{
	Datum		args[5];
	Datum	   *keys;
	uint64		n;
	uint64		i;
	int			nkeys = 0;

	args[0] = sub;
	args[1] = TimestampTzGetDatum(req->now);
	args[2] = Int32GetDatum(req->max_attempts);
	args[3] = TimestampTzGetDatum(low);
	if (!mark)
	{
		return SpiExecuteBool(&stmt_dead_any, args);
	}
	n = SpiExecute(&stmt_dead_keys, args, NULL, false, 0);
	keys = palloc(sizeof(Datum) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		text	   *key = DatumGetTextPCopy(SPI_getbinval(SPI_tuptable->vals[i],
														  SPI_tuptable->tupdesc, 1,
														  &isnull));

		if (SubsKeyTryLock(DatumGetInt32(sub), key))
			keys[nkeys++] = PointerGetDatum(key);
	}
	args[4] = SubsArray(keys, NULL, nkeys, TEXTOID);
	if (SpiExecute(&stmt_dead_mark, args, NULL, false, 0) > 0)
		SubsPromoteReturned(1, 2, 0);
	return true;
}

/*
 * Did a claim that f saw in progress roll back since?  Its range is then
 * read again by a later claim, and a message of a key there comes before
 * the key's messages this claim has read: the keys' locks of that claim
 * (outbox_subs_keylock.c) kept this one off its keys only while it ran.
 */
static bool
obx_claim_below_undone(const SubsFrontier *f)
{
	int			i;

	for (i = 0; i < f->nrows; i++)
	{
		TransactionId xid = f->rows[i].inserting;

		if (TransactionIdIsValid(xid) && !TransactionIdIsInProgress(xid) &&
			!TransactionIdDidCommit(xid))
			return true;
	}
	return false;
}

/*
 * Up to where a claim reads the log from frontier f, read under the lock:
 * below the horizon every append has its row in.  Each call of GapHorizon
 * takes a new position, so it is called once, not inside Min, which
 * evaluates the smaller of its arguments twice: a second horizon, taken
 * later, may lie past f->limit, and the claim would read on past the range
 * a rolled-back claim left, into ranges that other claims read.
 */
static int64
obx_read_horizon(const SubsFrontier *f)
{
	int64		horizon = GapHorizon();

	return Min(horizon, f->limit);
}

/*
 * Read the log from the frontier, under the subscription's lock (taken by
 * the caller): the holes first, then up to want messages leased, in at
 * most SUBS_FRESH_READS reads.  The lock is released before the
 * transaction ends when nothing read had an ordering key.  Returns how
 * many were leased.
 */
static int
obx_claim_fresh(Datum sub, const ClaimRequest *req, TimestampTz lease_end,
				int want, SubsSink *sink)
{
	Datum		args[10];
	char		nulls[10] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	SubsFrontier f;
	int64		horizon;
	int64		next;
	int			got;
	int			reads;
	bool		changed = false;
	bool		stop = false;
	StreamEntry *entries;
	HoleMark   *mark;
	int64		lowest;
	int64		first;

	args[0] = sub;

	/*
	 * The frontier first: a claim that commits between the two reads is
	 * then either still in progress in the frontier (its range counts for
	 * the mark) or committed before the holes are read (they show its
	 * holes).
	 */
	SubsFrontierRead(&f, DatumGetInt32(sub));
	lowest = SubsFrontierFloor(&f);
	mark = SubsHoleMark(DatumGetInt32(sub));
	got = SubsClaimHoles(sub, req, lease_end, want, mark->from, sink, &changed,
						 &first);
	if (f.nrows > 0 &&
		!(TransactionIdIsValid(mark->changed) &&
		  TransactionIdEquals(mark->changed, GetTopTransactionIdIfAny())))
		mark->from = Max(mark->from, Min(lowest, first));
	if (changed)
		mark->changed = GetTopTransactionIdIfAny();

	horizon = obx_read_horizon(&f);
	next = f.start;
	entries = palloc(sizeof(StreamEntry) * (want + SUBS_MAX_HOLES));

	args[1] = PointerGetDatum(req->topic);
	args[5] = TimestampTzGetDatum(req->now);
	args[6] = TimestampTzGetDatum(lease_end);
	args[7] = PointerGetDatum(req->owner);
	for (reads = 0; reads < SUBS_FRESH_READS && got < want && !stop; reads++)
	{
		Datum	   *fresh;
		Datum	   *hseq;
		Datum	   *hid;
		Datum	   *hkey;
		bool	   *hkeynull;
		Datum	   *havail;
		int			nfresh = 0;
		int			nholes = 0;
		bool		keyed = false;
		int64		end;
		int64		last;
		int			n;
		int			i;

		/*
		 * The end of the range a claim that rolled back left: the claims
		 * after it read on past it, so this one records the range and
		 * reads on from where the frontier now stands.  Returning with
		 * fewer messages than asked for, nothing perhaps, would tell the
		 * caller that nothing more is due.
		 */
		if (next >= horizon && horizon == f.limit && f.limit < PG_INT64_MAX)
		{
			SubsFrontierAdvance(&f, next, req->now);
			SubsFrontierRead(&f, DatumGetInt32(sub));
			horizon = obx_read_horizon(&f);
			next = f.start;
		}
		if (next >= horizon)
			break;

		n = SubsReadStream(req->topic, next, horizon, want - got, SUBS_MAX_HOLES,
						   entries, &end);

		/*
		 * The read ends before a message whose key another transaction
		 * changes now (outbox_subs_keylock.c): its row is decided once that
		 * transaction has ended, by a later claim.
		 */
		for (i = 0; i < n; i++)
		{
			if (entries[i].key != NULL &&
				!SubsKeyTryLock(DatumGetInt32(sub), entries[i].key))
				break;
		}

		/*
		 * A claim below this range that rolled back after the frontier was
		 * read (before, its range would be read first) may have held any
		 * of these keys: the read ends before the first keyed message,
		 * also when it ends at a key held by another transaction further
		 * on (the keys before it are not safe either).
		 */
		if (obx_claim_below_undone(&f))
		{
			int			held = i;

			for (i = 0; i < held; i++)
				if (entries[i].key != NULL)
					break;
		}
		if (i < n)
		{
			end = entries[i].seq;
			n = i;
			stop = true;
		}
		if (n > 0)
		{
			fresh = palloc(sizeof(Datum) * n);
			hseq = palloc(sizeof(Datum) * n);
			hid = palloc(sizeof(Datum) * n);
			hkey = palloc(sizeof(Datum) * n);
			hkeynull = palloc(sizeof(bool) * n);
			havail = palloc(sizeof(Datum) * n);
			for (i = 0; i < n; i++)
			{
				StreamEntry *e = &entries[i];

				keyed |= e->key != NULL;
				if (!e->in_progress)
				{
					fresh[nfresh++] = UUIDPGetDatum(&e->id);
					continue;
				}
				hseq[nholes] = Int64GetDatum(e->seq);
				hid[nholes] = UUIDPGetDatum(&e->id);
				hkey[nholes] = PointerGetDatum(e->key);
				hkeynull[nholes] = e->key == NULL;
				havail[nholes] = TimestampTzGetDatum(e->available_at);
				nholes++;
			}
			args[2] = SubsArray(fresh, NULL, nfresh, UUIDOID);
			args[3] = SubsArray(hseq, NULL, nholes, INT8OID);
			args[4] = SubsArray(hid, NULL, nholes, UUIDOID);
			args[8] = SubsArray(hkey, hkeynull, nholes, TEXTOID);
			args[9] = SubsArray(havail, NULL, nholes, TIMESTAMPTZOID);

			/*
			 * Due is judged by the clock after the read: a message whose
			 * append began after this claim did (its available_at) and
			 * committed before the read is due, and leased now.  Judged
			 * at the claim's start it got a state row to wait in, read
			 * by the next claims through subscription_state_due_idx,
			 * whose entries of leased rows a held snapshot keeps.
			 */
			args[5] = TimestampTzGetDatum(Max(req->now, GetCurrentTimestamp()));
			/* the frontier's rows chain in the tables of 1.5, as leases by range do */
			(void) SpiExecute(SubsFreshRead(f.chain, nholes == 0 && !keyed),
							  args, nulls, false, 0);
			got += SubsSinkRows(sink, &last);
			if (f.chain)
				SubsMemoNote(DatumGetInt32(sub), lease_end, req->owner, SUBS_COL_ID,
							 SUBS_COL_SEQ, SUBS_COL_KEY, SUBS_COL_BY_RANGE);
		}
		next = end;
	}
	SubsFrontierAdvance(&f, next, req->now);

	/*
	 * The next claim reads on now, the rows of this claim being in the
	 * frontier's chain and read again if this transaction rolls back.  What
	 * was decided against a key holds: the keys' locks of this claim are
	 * held until it ends, and the next claim stops before a message of one
	 * of them.  A claim that handed out or dropped holes keeps the lock
	 * until it ends.  (Under
	 * load, test 142_subscriptions_claim_rollback once saw two claims
	 * insert a state row for one position with the lock released early:
	 * a claim reading a rolled-back range again took a second horizon past
	 * its limit (above), and a scan of the frontier took for live a row that
	 * a claim had inserted and deleted, which committed meanwhile; both are
	 * fixed, see SubsFrontierRead.)
	 */
	if (SUBS_RELEASE_BEFORE_COMMIT && !changed && f.chain)
		SubsUnlock(DatumGetInt32(sub));
	return got;
}

/*
 * Lease up to req->batch_size messages of subscription name of req->topic
 * into sink->  Returns the number leased.  A subscription that a route
 * delivers is claimed only by its route's deliveries (req->by_route).
 */
static int
obx_subs_claim(const ClaimRequest *req, text *name, SubsSink *sink)
{
	Datum		args[8];
	Datum		sub;
	bool		isnull;
	bool		paused_null;
	bool		routed_null;
	TimestampTz paused;
	TimestampTz low = DT_NOBEGIN;
	TimestampTz lease_end = req->now + (int64) req->lease_seconds * USECS_PER_SEC;
	int			got;
	int32		sub32;
	bool		look;
	bool		locked = false;

	SpiConnect();
	args[0] = PointerGetDatum(req->topic);
	args[1] = PointerGetDatum(name);
	if (SpiExecute(StoreRoutesPerSubscription() ? &stmt_find_v15 : &stmt_find,
				   args, NULL, false, 1) == 0 && req->across)
	{
		SpiFinish();
		return 0;
	}
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("subscription \"%s\" of topic \"%s\" does not exist",
						text_to_cstring(name), text_to_cstring(req->topic)),
				 errhint("Create it with outbox.subscribe(topic, subscription).")));
	sub = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	paused = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
											   SPI_tuptable->tupdesc, 2,
											   &paused_null));
	(void) SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
	if (req->across &&
		(!isnull || DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
											   SPI_tuptable->tupdesc, 4, &routed_null))))
	{
		SpiFinish();
		return 0;
	}
	if (!isnull)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("subscription \"%s\" of topic \"%s\" has expired",
						text_to_cstring(name), text_to_cstring(req->topic)),
				 errdetail("It lagged more than outbox.subscription_max_lag, and purge may have deleted messages it had not read."),
				 errhint("Drop it with outbox.unsubscribe and subscribe again.")));
	if (!req->by_route &&
		DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4,
								   &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("subscription \"%s\" of topic \"%s\" is delivered by a route",
						text_to_cstring(name), text_to_cstring(req->topic)),
				 errdetail("A route's subscription is claimed only by its deliveries."),
				 errhint("Claim another subscription, or remove the route with outbox.unroute(topic, subscription).")));
	if (!paused_null && paused > req->now)
	{
		SpiFinish();
		return 0;
	}

	sub32 = DatumGetInt32(sub);
	args[0] = sub;
	args[1] = TimestampTzGetDatum(req->now);
	args[2] = Int32GetDatum(req->batch_size);
	args[3] = TimestampTzGetDatum(lease_end);
	args[4] = PointerGetDatum(req->owner);
	args[5] = PointerGetDatum(req->topic);
	args[6] = Int32GetDatum(req->max_attempts);
	got = 0;

	/*
	 * Leases that ran out, at most once a second: their index keeps the
	 * entries of every lease completed since the oldest snapshot still
	 * held, and only this look reads them.
	 */
	look = SubsLeaseCheckDue(sub32, req->now, &low);
	args[7] = TimestampTzGetDatum(low);

	/*
	 * The subscription's lock, for the read of the log (and for leases made
	 * dead, which may free a key), is taken before this claim changes any
	 * state row, or not waited for at all.  A claim's FOR UPDATE SKIP
	 * LOCKED skips a row locked now, but of a row whose update committed
	 * after its snapshot it locks the newer version, waiting for whoever
	 * changes it: a claim that leased or only so locked rows and then
	 * waited for the lock could wait for a transaction that holds the lock
	 * and waits for one of those rows.  So: the lock if it is free; else,
	 * when something is due (or the claim may not wait: req->no_wait), the
	 * due read without it (and the log only if the lock is free by then);
	 * else wait for it first.  The transaction holding it may be a claim
	 * that handed out holes, which holds it until its commit.
	 */
	if (look && obx_dead(sub, req, low, false))
	{
		if (req->no_wait)
			locked = SubsTryLock(sub32);
		else
		{
			(void) SubsLock(sub32);
			locked = true;
		}
		if (locked)
			(void) obx_dead(sub, req, low, true);
	}
	if (!locked)
		locked = SubsTryLock(sub32);
	if (!locked && !req->no_wait)
	{
		Datum		nargs[6];
		bool		hinted;
		bool		held;

		nargs[0] = sub;
		nargs[1] = TimestampTzGetDatum(req->now);
		nargs[2] = BoolGetDatum(look);
		nargs[3] = TimestampTzGetDatum(low);
		nargs[4] = Int32GetDatum(req->max_attempts);
		nargs[5] = TimestampTzGetDatum(SubsDueHint(sub32, req->now, &hinted, &held));
		if (!SpiExecuteBool(SubsLeaseRows() ? &stmt_due_now : &stmt_due_now_v14, nargs))
		{
			(void) SubsLock(sub32);
			locked = true;
		}
	}

	if (look)
	{
		/*
		 * Leases by range that ran out become state rows first, which the
		 * look then takes over, or makes dead after their last attempt:
		 * that needs the subscription's lock, else the next look (a
		 * second later) starts where this one did.
		 */
		if (SubsLeaseRows() && SubsLeaseExpiredToState(sub32, req->now, low) > 0)
		{
			if (locked)
				(void) obx_dead(sub, req, low, true);
			else
				SubsLeaseCheckAgain(sub32, low);
		}
		got = SubsClaimExpired(args, sink);
		if (got >= req->batch_size)
			SubsLeaseCheckAgain(sub32, low);
	}
	if (got < req->batch_size)
		got += SubsClaimDue(sub32, req, args, req->batch_size - got, sink);
	if (got < req->batch_size && !locked)
		locked = SubsTryLock(sub32);
	if (got < req->batch_size && locked)
		got += obx_claim_fresh(sub, req, lease_end, req->batch_size - got, sink);
	else if (locked)
		SubsUnlock(sub32);
	SpiFinish();
	return got;
}

/*
 * Lease up to req->batch_size messages of subscription name of req->topic
 * into store, whose descriptor is the row type of outbox.message.  Returns
 * the number leased.
 */
int
SubsClaimToTuplestore(const ClaimRequest *req, text *name, TupleDesc tupdesc,
					  Tuplestorestate *store)
{
	SubsSink	sink;

	SubsSinkTuplestore(&sink, tupdesc, store);
	return obx_subs_claim(req, name, &sink);
}

/*
 * The same, into *messages: ClaimedMessages in position order, in the
 * current memory context (for delivery by a route).
 */
int
SubsClaimMessages(const ClaimRequest *req, text *name, List **messages)
{
	SubsSink	sink;

	SubsSinkList(&sink, messages);
	return obx_subs_claim(req, name, &sink);
}
