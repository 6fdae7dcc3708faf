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
 * frontier (outbox_subs_read.c), and may give the lock back before the
 * transaction ends.  Every message read gets a state row: leased at once
 * when it is due and its key's head, else waiting for its available_at or
 * behind its key.  The due read and the look at leases that ran out lease
 * rows that are there, skipping those another claim holds; they need no
 * lock, but a claim takes the subscription's lock before them or never
 * waits for it (see obx_subs_claim).
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
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_spi.h"
#include "outbox_store_routes.h"
#include "outbox_stream.h"
#include "outbox_subs.h"
#include "outbox_subs_sink.h"

SAVED_STATEMENT(stmt_find) = {
	"SELECT sub_id, paused_until, expired_at, false FROM outbox.subscription"
	" WHERE topic OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
	SPI_OK_SELECT, 2, {TEXTOID, TEXTOID}
};

/* 1.5: and whether a route delivers it */
SAVED_STATEMENT(stmt_find_v15) = {
	"SELECT s.sub_id, s.paused_until, s.expired_at, EXISTS (SELECT 1 FROM outbox.routes r"
	"  WHERE r.topic OPERATOR(pg_catalog.=) s.topic"
	"  AND r.subscription OPERATOR(pg_catalog.=) s.name)"
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
	"  WHERE " SUBS_LAST_LEASE_OVER " FOR UPDATE SKIP LOCKED)"
	" UPDATE outbox.subscription_state x SET dead_at = $2, leased_until = NULL, lease_owner = NULL,"
	" last_error = pg_catalog.format('lease of owner \"%s\" expired on attempt %s of %s',"
	"  x.lease_owner, x.attempts, $3)"
	" WHERE x.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT c.ctid FROM c))"
	" RETURNING x.sub_id, x.ordering_key",
	SPI_OK_UPDATE_RETURNING, 4, {INT4OID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID}
};

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
#define SUBS_LEASE_ROWS(c) \
	"WITH c AS (" c "), " \
	" u AS (UPDATE outbox.subscription_state x SET attempts = x.attempts OPERATOR(pg_catalog.+) 1," \
	"  leased_until = $4, lease_owner = $5, available_at = $4" \
	"  WHERE x.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT c.ctid FROM c))" \
	"  RETURNING x.id, x.attempts, x.leased_until, x.lease_owner, x.last_error)" \
	" SELECT m.id, m.topic, m.event_type, m.payload, m.created_at, m.available_at," \
	" u.attempts, u.leased_until, u.lease_owner, NULL::pg_catalog.timestamptz," \
	" NULL::pg_catalog.timestamptz, u.last_error, m.seq, false, m.ordering_key" \
	" FROM u JOIN outbox.message m ON m.id OPERATOR(pg_catalog.=) u.id" \
	" WHERE m.id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT u.id FROM u)) ORDER BY m.seq"

/* The due read: retries, schedules, revivals and unblocked key heads. */
SAVED_STATEMENT(stmt_claim_due) = {
	SUBS_LEASE_ROWS("SELECT c.ctid FROM outbox.subscription_state c"
					"  WHERE c.sub_id OPERATOR(pg_catalog.=) $1 AND c.dead_at IS NULL"
					"  AND NOT c.blocked AND NOT c.hole AND c.leased_until IS NULL"
					"  AND c.available_at OPERATOR(pg_catalog.<=) $2"
					"  ORDER BY c.available_at LIMIT $3 FOR UPDATE SKIP LOCKED"),
	SPI_OK_SELECT, 7,
	{INT4OID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TEXTOID, TEXTOID, INT4OID}
};

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

/* whether stmt_dead_mark (same arguments) has a row to make dead */
SAVED_STATEMENT(stmt_dead_any) = {
	"SELECT EXISTS (SELECT 1 FROM outbox.subscription_state c"
	"  WHERE " SUBS_LAST_LEASE_OVER ")",
	SPI_OK_SELECT, 4, {INT4OID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID}
};

/*
 * Is anything of subscription $1 due at $2 for the due read, or (when $3,
 * the look at leases that ran out) for that look ($4 low, $5 max
 * attempts)?  Read without a lock.
 */
SAVED_STATEMENT(stmt_due_now) = {
	"SELECT EXISTS (SELECT 1 FROM outbox.subscription_state c"
	"  WHERE c.sub_id OPERATOR(pg_catalog.=) $1 AND c.dead_at IS NULL"
	"  AND NOT c.blocked AND NOT c.hole AND c.leased_until IS NULL"
	"  AND c.available_at OPERATOR(pg_catalog.<=) $2)"
	" OR ($3 AND EXISTS (SELECT 1 FROM outbox.subscription_state c"
	"  WHERE c.sub_id OPERATOR(pg_catalog.=) $1 AND c.leased_until IS NOT NULL"
	"  AND c.dead_at IS NULL AND c.leased_until OPERATOR(pg_catalog.<=) $2"
	"  AND c.leased_until OPERATOR(pg_catalog.>) $4"
	"  AND c.attempts OPERATOR(pg_catalog.<) $5))",
	SPI_OK_SELECT, 5, {INT4OID, TIMESTAMPTZOID, BOOLOID, TIMESTAMPTZOID, INT4OID}
};

/* the first column of the first row of the last statement, a boolean */
static bool
obx_first_bool(void)
{
	bool		isnull;
	Datum		d;

	if (SPI_processed == 0)
		return false;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return !isnull && DatumGetBool(d);
}

/*
 * Run stmt_dead_any (!mark: whether a lease that ran out on its last
 * attempt is there to make dead) or stmt_dead_mark (mark: make them dead,
 * free their keys; the caller holds the subscription's lock).
 */
static bool
obx_dead(Datum sub, const ClaimRequest *req, TimestampTz low, bool mark)
{
	Datum		args[4];

	args[0] = sub;
	args[1] = TimestampTzGetDatum(req->now);
	args[2] = Int32GetDatum(req->max_attempts);
	args[3] = TimestampTzGetDatum(low);
	if (!mark)
	{
		(void) SpiExecute(&stmt_dead_any, args, NULL, false, 1);
		return obx_first_bool();
	}
	if (SpiExecute(&stmt_dead_mark, args, NULL, false, 0) > 0)
		SubsPromoteReturned(1, 2);
	return true;
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
	int64		last;
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
	 * and waits for one of those rows (a completion, which takes the lock
	 * first; outbox_store_subs.c).  So: the lock if it is free; else, when
	 * something is due (or the claim may not wait: req->no_wait), the due
	 * read without it (and the log only if the lock is free by then); else
	 * wait for it first.  The transaction holding it may be a claim that
	 * read a message waiting behind another of its key, which holds it
	 * until its commit: what that commit makes due is then read after the
	 * wait.
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
		Datum		nargs[5];

		nargs[0] = sub;
		nargs[1] = TimestampTzGetDatum(req->now);
		nargs[2] = BoolGetDatum(look);
		nargs[3] = TimestampTzGetDatum(low);
		nargs[4] = Int32GetDatum(req->max_attempts);
		(void) SpiExecute(&stmt_due_now, nargs, NULL, false, 1);
		if (!obx_first_bool())
		{
			(void) SubsLock(sub32);
			locked = true;
		}
	}

	if (look)
	{
		(void) SpiExecute(&stmt_claim_expired, args, NULL, false, 0);
		got = SubsSinkRows(sink, &last);
		if (got >= req->batch_size)
			SubsLeaseCheckAgain(sub32, low);
	}
	if (got < req->batch_size)
	{
		args[2] = Int32GetDatum(req->batch_size - got);
		(void) SpiExecute(&stmt_claim_due, args, NULL, false, 0);
		got += SubsSinkRows(sink, &last);
	}
	if (got < req->batch_size && !locked)
		locked = SubsTryLock(sub32);
	if (got >= req->batch_size && locked)
		SubsUnlock(sub32);
	else if (locked)
	{
		TransactionId changer = InvalidTransactionId;

		for (;;)
		{
			got += SubsClaimLog(sub, req, lease_end, req->batch_size - got, sink,
								&changer);
			if (got > 0 || req->no_wait || !TransactionIdIsValid(changer) ||
				SubsHeld(sub32))
				break;

			/*
			 * Nothing to hand out but a key's message that waits for
			 * changer: wait for its end without the lock (it may be waiting
			 * for it), as a claim that found the lock held waits, and read
			 * again.
			 */
			XactLockTableWait(changer, NULL, NULL, XLTW_None);
			(void) SubsLock(sub32);
		}
	}
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
