/*-------------------------------------------------------------------------
 *
 * outbox_store_subs.c
 *		What becomes of what a named subscription has read
 *		(outbox.subscription_state) after its claim (outbox_store_subs_claim.c):
 *		complete, fail, extend, release, retry_dead, purge of its dead
 *		messages, and when a route's subscription is next due.  Handing out
 *		the next message of an ordering key is in outbox_subs_promote.c,
 *		managing subscriptions in outbox_subs_manage.c.
 *
 * A state row exists while the subscription is not done with its message;
 * completion deletes it.  Of the rows of one ordering key the first (in
 * position order) that is not dead is the key's head; the others are
 * blocked (a head leased by range is held by its key's row instead,
 * outbox_subs_lease.c).  Whenever a head leaves (completed, dead), the
 * next one is unblocked under the key's lock (outbox_subs_keylock.c), held until
 * commit, which a claim that adds a row to the key also holds until its
 * commit: so a claim that adds a row behind a head, and the completion of
 * that head, never miss each other.
 *
 * A completion or failure that changes a key takes the key's lock before
 * it changes any state row, never after, and never takes the
 * subscription's lock (outbox_subs_frontier.c): claims, which hold that
 * lock while they read the log, only try the keys' locks.  A claim's FOR
 * UPDATE SKIP LOCKED skips a row locked now, but of a row whose update
 * committed after the claim's snapshot it waits for whoever changes the
 * newer version: a completion that changed rows and then waited for the
 * subscription's lock held by such a claim closed a cycle (deadlock
 * detected) when completions took that lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/timestamp.h"
#include "utils/lsyscache.h"

#include "outbox.h"
#include "outbox_backoff.h"
#include "outbox_spi.h"
#include "outbox_stream.h"
#include "outbox_store_routes.h"
#include "outbox_subs.h"

/*
 * A lease that owner ($3) holds, in a subscription named $2.  A state row
 * has a lease owner exactly while it is leased (a failure, a revival and
 * death clear it), so the lease's end is not tested: a test of it would
 * let the planner read a subscription's leases (subscription_state_lease_idx)
 * instead of the message's row (subscription_state_id_idx).  For the same
 * reason the row's subscription is compared as sub_id + 0, which no index
 * of the state rows holds: a plan made on empty tables joined the
 * subscription's row to every state row of it (the primary key by sub_id
 * alone), and each completion read them all, under a held snapshot the
 * deleted ones too.
 */
#define SUBS_LEASE_HELD \
	"s.sub_id OPERATOR(pg_catalog.=) (x.sub_id OPERATOR(pg_catalog.+) 0)" \
	" AND s.name OPERATOR(pg_catalog.=) $2" \
	" AND x.lease_owner OPERATOR(pg_catalog.=) $3 AND x.dead_at IS NULL"

/*
 * The last column says whether the key keeps other rows: only then is
 * there a row to unblock (SubsPromoteReturned).  Its look-up is the one
 * the promotion would make, without a statement of its own for the keys
 * that have none, most of them.
 */
#define COMPLETE(which, type) { \
	"DELETE FROM outbox.subscription_state x USING outbox.subscription s" \
	" WHERE x.id OPERATOR(pg_catalog.=) " which " AND " SUBS_LEASE_HELD \
	" RETURNING x.sub_id, x.ordering_key, x.id," \
	" x.ordering_key IS NOT NULL AND EXISTS (SELECT 1 FROM outbox.subscription_state y" \
	"  WHERE y.sub_id OPERATOR(pg_catalog.=) x.sub_id" \
	"  AND y.ordering_key OPERATOR(pg_catalog.=) x.ordering_key" \
	"  AND y.dead_at IS NULL AND y.seq OPERATOR(pg_catalog.<>) x.seq)", \
	SPI_OK_DELETE_RETURNING, 3, {type, TEXTOID, TEXTOID} }
SAVED_STATEMENT(stmt_complete) = COMPLETE("$1", UUIDOID);
SAVED_STATEMENT(stmt_complete_many) = COMPLETE("ANY ($1)", UUIDARRAYOID);

/*
 * The keys of the keyed rows ($1 as in COMPLETE) a completion ($4 true)
 * or a failure is about to change, a failure's only when it makes its row
 * dead ($4: it does whatever the attempts; else from $5 attempts on),
 * with their subscriptions: their locks are taken first (obx_lock_keyed).
 * The rows are read by their ids in a subquery of their own, and only
 * then told keyed or not: with the key's test beside the others, the
 * index of keyed rows matched them all, and a plan made on empty tables
 * read it whole (every keyed row, under a held snapshot the deleted ones
 * too) rather than look up the ids.
 */
#define KEYED_SUBS(which, type) { \
	"SELECT DISTINCT k.sub_id, k.ordering_key FROM (SELECT x.sub_id, x.ordering_key" \
	" FROM outbox.subscription_state x, outbox.subscription s" \
	" WHERE x.id OPERATOR(pg_catalog.=) " which " AND " SUBS_LEASE_HELD \
	" AND ($4 OR x.attempts OPERATOR(pg_catalog.>=) $5)" SUBPLAN_FENCE ") k" \
	" WHERE k.ordering_key IS NOT NULL", \
	SPI_OK_SELECT, 5, {type, TEXTOID, TEXTOID, BOOLOID, INT4OID} }
SAVED_STATEMENT(stmt_keyed) = KEYED_SUBS("$1", UUIDOID);
SAVED_STATEMENT(stmt_keyed_many) = KEYED_SUBS("ANY ($1)", UUIDARRAYOID);

SAVED_STATEMENT(stmt_fail_lock) = {
	"SELECT x.sub_id, x.seq, x.attempts, x.ordering_key, x.ctid"
	" FROM outbox.subscription_state x, outbox.subscription s"
	" WHERE x.id OPERATOR(pg_catalog.=) $1 AND " SUBS_LEASE_HELD
	" FOR UPDATE OF x",
	SPI_OK_SELECT, 3, {UUIDOID, TEXTOID, TEXTOID}
};

/*
 * $4 is the next available_at (NULL when dead), $5 dead_at (NULL unless
 * dead); the row, locked by stmt_fail_lock, by its ctid $6 (with the
 * statistics of an empty table, the planner may read another index whole
 * for its sub_id and seq)
 */
SAVED_STATEMENT(stmt_fail_update) = {
	"UPDATE outbox.subscription_state SET leased_until = NULL, lease_owner = NULL,"
	" last_error = $3,"
	" available_at = COALESCE($4, available_at), dead_at = $5"
	" WHERE ctid OPERATOR(pg_catalog.=) $6"
	" AND sub_id OPERATOR(pg_catalog.=) $1 AND seq OPERATOR(pg_catalog.=) $2",
	SPI_OK_UPDATE, 6, {INT4OID, INT8OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIDOID}
};

/* leases given back untried: due again at once, the attempt not counted */
SAVED_STATEMENT(stmt_release) = {
	"UPDATE outbox.subscription_state x SET leased_until = NULL, lease_owner = NULL,"
	" available_at = $4, attempts = pg_catalog.int4larger(x.attempts OPERATOR(pg_catalog.-) 1, 0)"
	" FROM outbox.subscription s"
	" WHERE x.id OPERATOR(pg_catalog.=) ANY ($1) AND " SUBS_LEASE_HELD,
	SPI_OK_UPDATE, 4, {UUIDARRAYOID, TEXTOID, TEXTOID, TIMESTAMPTZOID}
};

/* the subscription $2 of topic $1 */
SAVED_STATEMENT(stmt_next_due_find) = {
	"SELECT sub_id FROM outbox.subscription"
	" WHERE topic OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
	SPI_OK_SELECT, 2, {TEXTOID, TEXTOID}
};

/*
 * Has subscription $1 of topic $2 work now: messages of the log it has not
 * read (from its first frontier row, at or after $3), or holes to look at
 * again (at or after $4)?  The bounds are where this backend's claims
 * found the first of each (SubsFrontierFrom, SubsHolesFrom): under a held
 * snapshot both indexes keep an entry for every row claims deleted since.
 */
SAVED_STATEMENT(stmt_next_due_now) = {
	"SELECT EXISTS (SELECT 1 FROM outbox.message m WHERE m.topic OPERATOR(pg_catalog.=) $2"
	"  AND m.seq OPERATOR(pg_catalog.>=) (SELECT f.next_seq FROM outbox.subscription_frontier f"
	"   WHERE f.sub_id OPERATOR(pg_catalog.=) $1 AND f.next_seq OPERATOR(pg_catalog.>=) $3"
	"   ORDER BY f.next_seq LIMIT 1))"
	" OR EXISTS (SELECT 1 FROM outbox.subscription_state x"
	"  WHERE x.sub_id OPERATOR(pg_catalog.=) $1 AND x.hole AND x.seq OPERATOR(pg_catalog.>=) $4)",
	SPI_OK_SELECT, 4, {INT4OID, TEXTOID, INT8OID, INT8OID}
};

/*
 * When a state row of subscription $1 that waits is next due after $2 (a
 * retry, a schedule, a lease that runs out).  A lease that ran out already
 * is due a second from now: claims look for such leases at most once a
 * second (outbox_store_subs_claim.c), so one that ran out just after a
 * look is taken by the first claim a second later, not the next one, and
 * the worker must not sleep past that.  Leases that ran out before $3
 * were seen by this backend's claims (SubsLeasesSeen).
 */
#define NEXT_DUE_WAIT(leases) { \
	"SELECT LEAST(" \
	" (SELECT pg_catalog.min(x.available_at) FROM outbox.subscription_state x" \
	"  WHERE x.sub_id OPERATOR(pg_catalog.=) $1 AND x.dead_at IS NULL" \
	"  AND NOT x.blocked AND NOT x.hole AND x.leased_until IS NULL)," \
	" (SELECT pg_catalog.min(CASE WHEN x.leased_until OPERATOR(pg_catalog.>) $2" \
	"   THEN x.leased_until ELSE $2 OPERATOR(pg_catalog.+) '1 second'::pg_catalog.interval END)" \
	"  FROM outbox.subscription_state x" \
	"  WHERE x.leased_until OPERATOR(pg_catalog.>) $3 AND x.leased_until IS NOT NULL" \
	"  AND x.dead_at IS NULL AND x.sub_id OPERATOR(pg_catalog.=) $1)" leases ")", \
	SPI_OK_SELECT, 3, {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID} }
SAVED_STATEMENT(stmt_next_due_wait_v14) = NEXT_DUE_WAIT("");
/* 1.5: and the leases by range */
SAVED_STATEMENT(stmt_next_due_wait) = NEXT_DUE_WAIT(
	", (SELECT pg_catalog.min(CASE WHEN l.leased_until OPERATOR(pg_catalog.>) $2"
	"   THEN l.leased_until ELSE $2 OPERATOR(pg_catalog.+) '1 second'::pg_catalog.interval END)"
	"  FROM outbox.subscription_lease l"
	"  WHERE l.leased_until OPERATOR(pg_catalog.>) $3 AND l.sub_id OPERATOR(pg_catalog.=) $1)");

SAVED_STATEMENT(stmt_extend) = {
	"UPDATE outbox.subscription_state x SET leased_until = $4, available_at = $4"
	" FROM outbox.subscription s"
	" WHERE x.id OPERATOR(pg_catalog.=) $1 AND " SUBS_LEASE_HELD,
	SPI_OK_UPDATE, 4, {UUIDOID, TEXTOID, TEXTOID, TIMESTAMPTZOID}
};

/* the subscriptions (of name $2) whose dead message $1 is revived, locked */
SAVED_STATEMENT(stmt_retry_lock) = {
	"SELECT s.sub_id FROM outbox.subscription s"
	" WHERE s.name OPERATOR(pg_catalog.=) $2 AND s.sub_id OPERATOR(pg_catalog.=) ANY ("
	"  SELECT x.sub_id FROM outbox.subscription_state x"
	"  WHERE x.id OPERATOR(pg_catalog.=) $1 AND x.dead_at IS NOT NULL)"
	" ORDER BY s.sub_id",
	SPI_OK_SELECT, 2, {UUIDOID, TEXTOID}
};

SAVED_STATEMENT(stmt_retry_topic_lock) = {
	"SELECT sub_id FROM outbox.subscription WHERE topic OPERATOR(pg_catalog.=) $1"
	" AND name OPERATOR(pg_catalog.=) $2",
	SPI_OK_SELECT, 2, {TEXTOID, TEXTOID}
};

/*
 * A revived message is due at once ($3); it waits behind its key's head
 * when an earlier message of its key is not done.  The dead rows are
 * found by a range of the index of dead letters (every dead row is in it)
 * or by their subscriptions, not by reading that index whole for the
 * subscriptions' column, which PostgreSQL 18 chose on empty tables.
 */
#define RETRY_DEAD(which, type) { \
	"UPDATE outbox.subscription_state x SET dead_at = NULL, attempts = 0," \
	" available_at = $3, leased_until = NULL, lease_owner = NULL," \
	" blocked = x.ordering_key IS NOT NULL AND EXISTS (" \
	"  SELECT 1 FROM outbox.subscription_state y" \
	"  WHERE y.sub_id OPERATOR(pg_catalog.=) x.sub_id" \
	"  AND y.ordering_key OPERATOR(pg_catalog.=) x.ordering_key" \
	"  AND y.dead_at IS NULL AND y.seq OPERATOR(pg_catalog.<) x.seq)" \
	" WHERE x.sub_id OPERATOR(pg_catalog.=) ANY ($1) AND " which \
	" AND x.dead_at OPERATOR(pg_catalog.<=) 'infinity'::pg_catalog.timestamptz", \
	SPI_OK_UPDATE, 3, {INT4ARRAYOID, type, TIMESTAMPTZOID} }
SAVED_STATEMENT(stmt_retry_dead) = RETRY_DEAD("x.id OPERATOR(pg_catalog.=) $2", UUIDOID);
SAVED_STATEMENT(stmt_retry_dead_topic) = RETRY_DEAD("$2::pg_catalog.bool", BOOLOID);

SAVED_STATEMENT(stmt_purge_dead) = {
	"DELETE FROM outbox.subscription_state"
	" WHERE dead_at OPERATOR(pg_catalog.<) $1 AND dead_at IS NOT NULL",
	SPI_OK_DELETE, 1, {TIMESTAMPTZOID}
};

/* Are the tables of 1.4 there (outbox.subscription)? */
bool
SubsSchema(void)
{
	return SubsHasTable("subscription_state");
}

/*
 * Lock the keys that keyed (stmt_keyed or stmt_keyed_many, run with args)
 * returns, before the caller changes any state row: see the head of this
 * file.  Runs inside the caller's SPI connection.
 */
static void
obx_lock_keyed(SavedStatement *keyed, Datum *args, int nmore, Datum *more_subs,
			   Datum *more_keys)
{
	uint64		n = SpiExecute(keyed, args, NULL, false, 0);
	Datum	   *subs;
	Datum	   *keys;
	uint64		i;

	if (n + nmore == 0)
		return;
	subs = palloc(sizeof(Datum) * (n + nmore));
	keys = palloc(sizeof(Datum) * (n + nmore));
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		subs[i] = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1,
								&isnull);
		keys[i] = PointerGetDatum(DatumGetTextPCopy(
			SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull)));
	}
	for (i = 0; i < nmore; i++)
	{
		subs[n + i] = more_subs[i];
		keys[n + i] = more_keys[i];
	}
	SubsKeyLockMany((int) (n + nmore), subs, keys);
	pfree(subs);
	pfree(keys);
}

/* a uuid[] of the one message id */
static Datum
obx_one_id(pg_uuid_t *id)
{
	Datum		elem = UUIDPGetDatum(id);

	return PointerGetDatum(construct_array(&elem, 1, UUIDOID, UUID_LEN, false,
										   TYPALIGN_CHAR));
}

/*
 * complete and complete_many: the state rows go, the keys they held move
 * on; then the leases by range of those of the n messages (ids, a uuid[];
 * for complete, 0: the one id) that had no state row.  Only those are
 * looked up in the lease rows: the look-up of a message that no lease row
 * holds reads back through the lease rows of its subscription, and under
 * a held snapshot the index keeps an entry for every one deleted since.
 */
static int64
obx_complete(SavedStatement *keyed, SavedStatement *stmt, Datum id, Datum ids,
			 int n, text *owner, text *name)
{
	Datum		args[5];
	int64		done;
	bool		leases;
	Datum		left = (Datum) 0;
	Datum	   *memo_subs = NULL;
	Datum	   *memo_keys = NULL;
	int			nmemo;

	args[0] = id;
	args[1] = PointerGetDatum(name);
	args[2] = PointerGetDatum(owner);
	args[3] = BoolGetDatum(true);
	args[4] = Int32GetDatum(0);
	SpiConnect();
	/* the keys of the lease rows this backend remembers too: one round of locks */
	nmemo = SubsLeaseRows() ? SubsLeaseKeys(ids, DatumGetUUIDP(id), owner, &memo_subs,
											&memo_keys) : 0;
	obx_lock_keyed(keyed, args, nmemo, memo_subs, memo_keys);
	done = (int64) SpiExecute(stmt, args, NULL, false, 0);
	leases = done < n && SubsLeaseRows();
	/* (before SPI_tuptable goes to the promotion) */
	if (leases)
		left = done > 0 ? SubsLeaseIdsLeft(ids, n, 3) :
			ids != (Datum) 0 ? ids : obx_one_id(DatumGetUUIDP(id));
	if (done > 0)
		SubsPromoteReturned(1, 2, 4);
	if (leases)
	{
		SubsKeySet	promote = {0};

		done += SubsLeaseComplete(left, owner, name, &promote);
		SubsPromoteKeys(promote.n, promote.subs, promote.keys);
	}
	SpiFinish();
	return done;
}

bool
SubsComplete(pg_uuid_t *id, text *owner, text *name)
{
	return obx_complete(&stmt_keyed, &stmt_complete, UUIDPGetDatum(id), (Datum) 0,
						1, owner, name) > 0;
}

int64
SubsCompleteMany(ArrayType *ids, text *owner, text *name)
{
	return obx_complete(&stmt_keyed_many, &stmt_complete_many,
						PointerGetDatum(ids), PointerGetDatum(ids),
						ArrayGetNItems(ARR_NDIM(ids), ARR_DIMS(ids)), owner, name);
}

/*
 * The leases by range that owner holds on ids (a uuid[]) become state
 * rows, for a statement that finds leases only there: false when there
 * were none.  Runs inside the caller's SPI connection.
 */
static bool
obx_leases_to_state(Datum ids, text *owner, text *name)
{
	return SubsLeaseRows() && SubsLeaseToState(ids, owner, name) > 0;
}

/*
 * A failed delivery: back off, or dead after outbox.max_attempts (the
 * key's next message is handed out then, as it is for the default
 * subscription).
 */
bool
SubsFail(pg_uuid_t *id, text *owner, text *error, text *name, TimestampTz now)
{
	return SubsFailAt(id, owner, error, name, now, 0, false);
}

/*
 * SubsFail, with the time of the next attempt given (retry_at; 0: the
 * backoff's) or the message dead at once (dead), as StoreFailAt does for
 * the default subscription.
 */
bool
SubsFailAt(pg_uuid_t *id, text *owner, text *error, text *name, TimestampTz now,
		   TimestampTz retry_at, bool dead)
{
	Datum		args[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	bool		isnull;
	bool		keynull;
	int32		attempts;
	Datum		sub;
	Datum		key;
	ItemPointerData tid;

	args[0] = UUIDPGetDatum(id);
	args[1] = PointerGetDatum(name);
	args[2] = PointerGetDatum(owner);
	args[3] = BoolGetDatum(dead);
	args[4] = Int32GetDatum(outbox_max_attempts);
	SpiConnect();
	obx_lock_keyed(&stmt_keyed, args, 0, NULL, NULL);
	if (SpiExecute(&stmt_fail_lock, args, NULL, false, 1) == 0)
	{
		/*
		 * Leased by range: its state row first, then the lock of its key
		 * (the head of a key leased so had no state row to find it by),
		 * before the failure decides anything about the key.
		 */
		bool		found = obx_leases_to_state(obx_one_id(id), owner, name);

		if (found)
		{
			obx_lock_keyed(&stmt_keyed, args, 0, NULL, NULL);
			found = SpiExecute(&stmt_fail_lock, args, NULL, false, 1) > 0;
		}
		if (!found)
		{
			SpiFinish();
			return false;
		}
	}
	sub = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	args[1] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	attempts = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 3, &isnull));
	key = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &keynull);
	if (!keynull)
		key = PointerGetDatum(DatumGetTextPCopy(key));
	tid = *(ItemPointer) DatumGetPointer(SPI_getbinval(SPI_tuptable->vals[0],
													   SPI_tuptable->tupdesc, 5,
													   &isnull));
	args[5] = PointerGetDatum(&tid);

	args[0] = sub;
	args[2] = PointerGetDatum(error);
	if (attempts >= outbox_max_attempts || dead)
	{
		nulls[3] = 'n';
		args[4] = TimestampTzGetDatum(now);
	}
	else
	{
		int64		delay = BackoffDelaySeconds(attempts, outbox_backoff_seconds,
												outbox_backoff_max_seconds);
		TimestampTz next = now + delay * USECS_PER_SEC;

		if (retry_at != 0)
			next = Max(now, Min(retry_at, now +
								(int64) outbox_backoff_max_seconds * USECS_PER_SEC));
		args[3] = TimestampTzGetDatum(next);
		nulls[4] = 'n';
	}
	(void) SpiExecute(&stmt_fail_update, args, nulls, false, 0);
	if (nulls[3] == 'n' && !keynull)
		SubsPromoteKeys(1, &sub, &key);
	SpiFinish();

	ereport(LOG,
			(errmsg("outbox message %s failed attempt %d of %d in subscription \"%s\": %s",
					DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(id))),
					attempts, outbox_max_attempts, text_to_cstring(name),
					text_to_cstring(error)),
			 errhidestmt(true)));
	return true;
}

/* Push the lease that owner holds to now + lease_seconds. */
bool
SubsExtend(pg_uuid_t *id, text *owner, int lease_seconds, text *name,
		   TimestampTz now)
{
	Datum		args[4];
	bool		done;

	args[0] = UUIDPGetDatum(id);
	args[1] = PointerGetDatum(name);
	args[2] = PointerGetDatum(owner);
	args[3] = TimestampTzGetDatum(now + (int64) lease_seconds * USECS_PER_SEC);
	SpiConnect();
	done = SpiExecute(&stmt_extend, args, NULL, false, 0) > 0 ||
		(obx_leases_to_state(obx_one_id(id), owner, name) &&
		 SpiExecute(&stmt_extend, args, NULL, false, 0) > 0);
	SpiFinish();
	return done;
}

/*
 * Give back the leases owner holds in subscription name on ids (a uuid[])
 * without counting the attempt: due again at once.  Returns how many.
 */
int64
SubsRelease(ArrayType *ids, text *owner, text *name, TimestampTz now)
{
	Datum		args[4];
	int64		released;

	args[0] = PointerGetDatum(ids);
	args[1] = PointerGetDatum(name);
	args[2] = PointerGetDatum(owner);
	args[3] = TimestampTzGetDatum(now);
	SpiConnect();
	released = (int64) SpiExecute(&stmt_release, args, NULL, false, 0);
	if (released < ArrayGetNItems(ARR_NDIM(ids), ARR_DIMS(ids)) &&
		obx_leases_to_state(PointerGetDatum(ids), owner, name))
		released += (int64) SpiExecute(&stmt_release, args, NULL, false, 0);
	SpiFinish();
	return released;
}

/*
 * When the state rows of a subscription that wait are next due, as this
 * backend last found it: a few subscriptions, the least recently found
 * replaced.  Under a held snapshot the indexes that answer keep an entry
 * for every lease and retry done since, and the worker asks after each
 * round, many times a second under load: it asks the tables at most once
 * a second per subscription.
 */
typedef struct NextWait
{
	Oid			relid;
	int32		sub_id;
	TimestampTz found;			/* when */
	TimestampTz next;			/* what (DT_NOEND: nothing waits) */
} NextWait;

#define SUBS_NEXT_WAITS		16
#define SUBS_NEXT_WAIT_AGE	USECS_PER_SEC
static NextWait next_waits[SUBS_NEXT_WAITS];

static TimestampTz
obx_next_wait(int32 sub, TimestampTz now)
{
	Oid			relid = SubsStateRelid();
	NextWait   *w = NULL;
	Datum		args[3];
	Datum		next;
	bool		isnull;
	int			i;

	for (i = 0; i < SUBS_NEXT_WAITS; i++)
	{
		if (next_waits[i].relid == relid && next_waits[i].sub_id == sub)
		{
			w = &next_waits[i];
			break;
		}
		if (w == NULL || next_waits[i].found < w->found)
			w = &next_waits[i];
	}

	/*
	 * What was found less than a second ago and lay ahead then: the worker
	 * looks again at most a second after that, for what became due
	 * meanwhile (a retry's backoff, a new lease, both longer than that in
	 * any use that matters).  What was due when found is looked at again.
	 */
	if (w->relid == relid && w->sub_id == sub && w->found <= now &&
		now - w->found < SUBS_NEXT_WAIT_AGE && w->next > w->found)
		return Min(w->next, w->found + SUBS_NEXT_WAIT_AGE);

	args[0] = Int32GetDatum(sub);
	args[1] = TimestampTzGetDatum(now);
	args[2] = TimestampTzGetDatum(SubsLeasesSeen(sub, now));
	if (!SpiRunFirstRow(SubsLeaseRows() ? &stmt_next_due_wait : &stmt_next_due_wait_v14,
						args, NULL, &next, &isnull, 1) || isnull)
		next = TimestampTzGetDatum(DT_NOEND);
	w->relid = relid;
	w->sub_id = sub;
	w->found = now;
	w->next = DatumGetTimestampTz(next);
	return w->next;
}

/*
 * When something of subscription name of topic is next due (now at the
 * earliest; DT_NOEND: nothing), for the worker's wait.
 */
TimestampTz
SubsNextDue(text *topic, text *name, TimestampTz now)
{
	Datum		args[4];
	Datum		value;
	bool		isnull;
	int32		sub;

	args[0] = PointerGetDatum(topic);
	args[1] = PointerGetDatum(name);
	if (!SpiRunFirstRow(&stmt_next_due_find, args, NULL, &value, &isnull, 1) || isnull)
		return DT_NOEND;
	sub = DatumGetInt32(value);
	args[0] = Int32GetDatum(sub);
	args[1] = PointerGetDatum(topic);
	args[2] = Int64GetDatum(SubsFrontierFrom(sub));
	args[3] = Int64GetDatum(SubsHolesFrom(sub));
	if (SpiRunFirstRow(&stmt_next_due_now, args, NULL, &value, &isnull, 1) &&
		!isnull && DatumGetBool(value))
		return now;
	return Max(now, obx_next_wait(sub, now));
}

/*
 * Revive dead messages: which (a uuid, or true for every dead message) of
 * the subscriptions locked by lock (with lockargs).
 */
static int64
obx_retry(SavedStatement *lock, Datum *lockargs, Datum which, TimestampTz now)
{
	Datum		args[3];
	Datum	   *subs;
	uint64		n;
	uint64		i;
	int64		revived = 0;

	SpiConnect();
	n = SpiExecute(lock, lockargs, NULL, false, 0);
	if (n > 0)
	{
		subs = palloc(sizeof(Datum) * n);
		for (i = 0; i < n; i++)
		{
			bool		isnull;

			subs[i] = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
									1, &isnull);
		}
		SubsKeyLockAll((int) n, subs);
		args[0] = PointerGetDatum(construct_array(subs, (int) n, INT4OID, 4, true,
												  TYPALIGN_INT));
		args[1] = which;
		args[2] = TimestampTzGetDatum(now);
		revived = (int64) SpiExecute(lock == &stmt_retry_lock ? &stmt_retry_dead :
									 &stmt_retry_dead_topic, args, NULL, false, 0);
	}
	SpiFinish();
	return revived;
}

bool
SubsRetryDead(pg_uuid_t *id, text *name, TimestampTz now)
{
	Datum		args[2];

	args[0] = UUIDPGetDatum(id);
	args[1] = PointerGetDatum(name);
	return obx_retry(&stmt_retry_lock, args, UUIDPGetDatum(id), now) > 0;
}

int64
SubsRetryDeadTopic(text *topic, text *name, TimestampTz now)
{
	Datum		args[2];

	args[0] = PointerGetDatum(topic);
	args[1] = PointerGetDatum(name);
	return obx_retry(&stmt_retry_topic_lock, args, BoolGetDatum(true), now);
}

/*
 * Purge the dead letters of named subscriptions that died before horizon,
 * so that their messages may go.  Runs inside the caller's SPI connection.
 */
void
SubsPurgeDead(TimestampTz horizon)
{
	Datum		args[1];

	args[0] = TimestampTzGetDatum(horizon);
	(void) SpiExecute(&stmt_purge_dead, args, NULL, false, 0);
}
