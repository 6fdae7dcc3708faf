/*-------------------------------------------------------------------------
 *
 * outbox_subs_manage.c
 *		Managing subscriptions: subscribe, unsubscribe and pause of named
 *		ones, the default subscription of a topic dropped, paused and
 *		brought back, the expiry of subscriptions that lag more than
 *		outbox.subscription_max_lag, and whether a claim of a subscription
 *		may run (for the API and for routes).
 *
 * Whether any default subscription was dropped is asked by every claim of
 * a default subscription; each backend keeps the answer until a drop or a
 * return of one sends an invalidation of outbox.subscription's relation
 * cache entry.
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
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_spi.h"
#include "outbox_stream.h"
#include "outbox_store_routes.h"
#include "outbox_subs.h"

static void obx_dropped_changed(void);

SAVED_STATEMENT(stmt_create) = {
	"WITH s AS (INSERT INTO outbox.subscription (topic, name, start_seq, created_at)"
	"  VALUES ($1, $2, $3, $4) ON CONFLICT (topic, name) DO NOTHING"
	"  RETURNING sub_id, start_seq)"
	" INSERT INTO outbox.subscription_frontier (sub_id, next_seq)"
	" SELECT sub_id, start_seq FROM s",
	SPI_OK_INSERT, 4, {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID}, OBX_SCANS_ANY
};

/* the first position of the messages kept that were created at or after $2 */
SAVED_STATEMENT(stmt_since) = {
	"SELECT pg_catalog.min(seq) FROM outbox.message"
	" WHERE topic OPERATOR(pg_catalog.=) $1 AND created_at OPERATOR(pg_catalog.>=) $2",
	SPI_OK_SELECT, 2, {TEXTOID, TIMESTAMPTZOID}, OBX_SCANS_INDEX
};

/* the next position the sequence gives, without taking it */
SAVED_STATEMENT(stmt_seq_next) = {
	"SELECT CASE WHEN is_called THEN last_value OPERATOR(pg_catalog.+) 1"
	" ELSE last_value END FROM outbox.message_seq",
	SPI_OK_SELECT, 0, {InvalidOid}, OBX_SCANS_ANY
};

/* the default subscription of a topic, dropped and brought back */
SAVED_STATEMENT(stmt_default_routed) = {
	"SELECT 1 FROM outbox.routes WHERE topic OPERATOR(pg_catalog.=) $1",
	SPI_OK_SELECT, 1, {TEXTOID}
};

/* 1.5: the route of the default subscription, not those of named ones */
SAVED_STATEMENT(stmt_default_routed_v15) = {
	"SELECT 1 FROM outbox.routes WHERE topic OPERATOR(pg_catalog.=) $1 AND subscription IS NULL",
	SPI_OK_SELECT, 1, {TEXTOID}
};

/*
 * The row of a topic's default subscription (name NULL) says it was
 * dropped (paused_until NULL) or is paused (paused_until set).  Dropping
 * a paused one drops it.
 */
SAVED_STATEMENT(stmt_default_drop) = {
	"INSERT INTO outbox.subscription AS s (topic, name, start_seq, created_at)"
	" VALUES ($1, NULL, 0, $2) ON CONFLICT (topic, name) DO UPDATE SET paused_until = NULL"
	" WHERE s.paused_until IS NOT NULL",
	SPI_OK_INSERT, 2, {TEXTOID, TIMESTAMPTZOID}, OBX_SCANS_ANY
};

SAVED_STATEMENT(stmt_default_restore) = {
	"DELETE FROM outbox.subscription WHERE topic OPERATOR(pg_catalog.=) $1 AND name IS NULL"
	" AND paused_until IS NULL",
	SPI_OK_DELETE, 1, {TEXTOID}
};

SAVED_STATEMENT(stmt_default_dropped) = {
	"SELECT 1 FROM outbox.subscription WHERE topic OPERATOR(pg_catalog.=) $1 AND name IS NULL"
	" AND paused_until IS NULL",
	SPI_OK_SELECT, 1, {TEXTOID}
};

/* $2 now: dropped, or paused beyond now */
SAVED_STATEMENT(stmt_default_held) = {
	"SELECT paused_until FROM outbox.subscription WHERE topic OPERATOR(pg_catalog.=) $1 AND name IS NULL"
	" AND (paused_until IS NULL OR paused_until OPERATOR(pg_catalog.>) $2)",
	SPI_OK_SELECT, 2, {TEXTOID, TIMESTAMPTZOID}
};

/* $2 until; no row when it was dropped */
SAVED_STATEMENT(stmt_default_pause) = {
	"INSERT INTO outbox.subscription AS s (topic, name, start_seq, created_at, paused_until)"
	" VALUES ($1, NULL, 0, pg_catalog.now(), $2) ON CONFLICT (topic, name)"
	" DO UPDATE SET paused_until = excluded.paused_until WHERE s.paused_until IS NOT NULL",
	SPI_OK_INSERT, 2, {TEXTOID, TIMESTAMPTZOID}, OBX_SCANS_ANY
};

SAVED_STATEMENT(stmt_default_resume) = {
	"DELETE FROM outbox.subscription WHERE topic OPERATOR(pg_catalog.=) $1 AND name IS NULL"
	" AND paused_until IS NOT NULL",
	SPI_OK_DELETE, 1, {TEXTOID}
};

SAVED_STATEMENT(stmt_default_dropped_any) = {
	"SELECT 1 FROM outbox.subscription WHERE name IS NULL",
	SPI_OK_SELECT, 0, {InvalidOid}, OBX_SCANS_ANY
};

SAVED_STATEMENT(stmt_drop_find) = {
	"SELECT sub_id FROM outbox.subscription WHERE topic OPERATOR(pg_catalog.=) $1"
	" AND name OPERATOR(pg_catalog.=) $2",
	SPI_OK_SELECT, 2, {TEXTOID, TEXTOID}
};

SAVED_STATEMENT(stmt_drop) = {
	"DELETE FROM outbox.subscription WHERE sub_id OPERATOR(pg_catalog.=) $1",
	SPI_OK_DELETE, 1, {INT4OID}
};

SAVED_STATEMENT(stmt_drop_state) = {
	"DELETE FROM outbox.subscription_state WHERE sub_id OPERATOR(pg_catalog.=) $1",
	SPI_OK_DELETE, 1, {INT4OID}
};

SAVED_STATEMENT(stmt_drop_frontier) = {
	"DELETE FROM outbox.subscription_frontier WHERE sub_id OPERATOR(pg_catalog.=) $1",
	SPI_OK_DELETE, 1, {INT4OID}
};

SAVED_STATEMENT(stmt_drop_leases) = {
	"WITH k AS (DELETE FROM outbox.subscription_key WHERE sub_id OPERATOR(pg_catalog.=) $1)"
	" DELETE FROM outbox.subscription_lease WHERE sub_id OPERATOR(pg_catalog.=) $1",
	SPI_OK_DELETE, 1, {INT4OID}
};

SAVED_STATEMENT(stmt_pause) = {
	"UPDATE outbox.subscription SET paused_until = $3"
	" WHERE topic OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
	SPI_OK_UPDATE, 3, {TEXTOID, TEXTOID, TIMESTAMPTZOID}
};


/* a named subscription delivered by a route: $1 topic, $2 name */
SAVED_STATEMENT(stmt_routed) = {
	"SELECT 1 FROM outbox.routes WHERE topic OPERATOR(pg_catalog.=) $1"
	" AND subscription OPERATOR(pg_catalog.=) $2",
	SPI_OK_SELECT, 2, {TEXTOID, TEXTOID}
};


/*
 * The subscriptions whose oldest pending message (the first unread one, or
 * the first of its state rows not dead, or with the tables of 1.5 the
 * first of its leases by range) was created before $2 expire at $1.
 */
#define EXPIRE(leases) { \
	"UPDATE outbox.subscription s SET expired_at = $1" \
	" WHERE s.expired_at IS NULL AND s.name IS NOT NULL AND EXISTS (" \
	"  SELECT 1 FROM outbox.message m WHERE m.topic OPERATOR(pg_catalog.=) s.topic" \
	"  AND m.seq OPERATOR(pg_catalog.=) LEAST(" \
	"   (SELECT pg_catalog.min(x.seq) FROM outbox.subscription_state x" \
	"    WHERE x.sub_id OPERATOR(pg_catalog.=) s.sub_id AND x.dead_at IS NULL)," leases \
	"   (SELECT pg_catalog.min(u.seq) FROM outbox.message u" \
	"    WHERE u.topic OPERATOR(pg_catalog.=) s.topic" \
	"    AND u.seq OPERATOR(pg_catalog.>=) (SELECT f.next_seq FROM outbox.subscription_frontier f" \
	"     WHERE f.sub_id OPERATOR(pg_catalog.=) s.sub_id ORDER BY f.next_seq LIMIT 1)))" \
	"  AND m.created_at OPERATOR(pg_catalog.<) $2)" \
	" RETURNING s.topic, s.name", \
	SPI_OK_UPDATE_RETURNING, 2, {TIMESTAMPTZOID, TIMESTAMPTZOID}, OBX_SCANS_INDEX_OR_BITMAP }
SAVED_STATEMENT(stmt_expire_v14) = EXPIRE("");
SAVED_STATEMENT(stmt_expire) = EXPIRE(
	"   (SELECT pg_catalog.min(l.seqs[1]) FROM outbox.subscription_lease l"
	"    WHERE l.sub_id OPERATOR(pg_catalog.=) s.sub_id),");


/*
 * Subscribe name to topic, reading from the messages kept created at or
 * after since, or (!since_given) from the appends that take a position
 * from now on.  False when the subscription exists.
 */
bool
SubsCreate(text *topic, text *name, bool since_given, TimestampTz since,
		   TimestampTz now)
{
	Datum		args[4];
	int64		start = 0;
	bool		found = false;
	bool		isnull;
	bool		created;

	SpiConnect();
	if (since_given)
	{
		args[0] = PointerGetDatum(topic);
		args[1] = TimestampTzGetDatum(since);
		(void) SpiExecute(&stmt_since, args, NULL, true, 1);
		start = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											SPI_tuptable->tupdesc, 1, &isnull));
		found = !isnull;
	}
	if (!found && StreamAvailable() && GapAvailable())
	{
		/* the appends whose rows are not in yet; not those in progress */
		start = GapHorizon();
	}
	else if (!found)
	{
		(void) SpiExecute(&stmt_seq_next, NULL, NULL, true, 1);
		start = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											SPI_tuptable->tupdesc, 1, &isnull));
	}
	args[0] = PointerGetDatum(topic);
	args[1] = PointerGetDatum(name);
	args[2] = Int64GetDatum(start);
	args[3] = TimestampTzGetDatum(now);
	created = SpiExecute(&stmt_create, args, NULL, false, 0) > 0;
	SpiFinish();
	return created;
}

/* Drop a subscription and its state.  False when there was none. */
bool
SubsDrop(text *topic, text *name)
{
	Datum		args[2];
	bool		dropped = false;

	args[0] = PointerGetDatum(topic);
	args[1] = PointerGetDatum(name);
	SpiConnect();
	if (StoreRoutesPerSubscription() &&
		SpiExecute(&stmt_routed, args, NULL, false, 1) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("subscription \"%s\" of topic \"%s\" is delivered by a route",
						text_to_cstring(name), text_to_cstring(topic)),
				 errhint("Remove the route first with outbox.unroute(topic, subscription).")));
	if (SpiExecute(&stmt_drop_find, args, NULL, false, 0) > 0)
	{
		bool		isnull;

		args[0] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
								&isnull);

		/*
		 * Under the subscription's lock, once the claims that read the log
		 * before have ended: no state row of theirs is left behind.
		 */
		(void) SubsLock(DatumGetInt32(args[0]));
		SubsWaitClaims(DatumGetInt32(args[0]));
		if (SpiExecute(&stmt_drop, args, NULL, false, 0) > 0)
		{
			(void) SpiExecute(&stmt_drop_state, args, NULL, false, 0);
			(void) SpiExecute(&stmt_drop_frontier, args, NULL, false, 0);
			if (SubsLeaseRows())
				(void) SpiExecute(&stmt_drop_leases, args, NULL, false, 0);
			dropped = true;
		}
	}
	SpiFinish();
	return dropped;
}

/* Pause a subscription until until, or (!pause) resume it. */
bool
SubsPause(text *topic, text *name, bool pause, TimestampTz until)
{
	Datum		args[3];
	char		nulls[3] = {' ', ' ', pause ? ' ' : 'n'};

	args[0] = PointerGetDatum(topic);
	args[1] = PointerGetDatum(name);
	args[2] = TimestampTzGetDatum(until);
	return SpiRun(&stmt_pause, args, nulls) > 0;
}


/*
 * With outbox.subscription_max_lag set: expire the subscriptions that lag
 * more, so that they hold no message back, and say so in the log.  Runs
 * inside the caller's SPI connection.
 */
void
SubsExpire(TimestampTz now)
{
	Datum		args[2];
	uint64		i;

	if (outbox_subscription_max_lag <= 0)
		return;
	args[0] = TimestampTzGetDatum(now);
	args[1] = TimestampTzGetDatum(now - (int64) outbox_subscription_max_lag * USECS_PER_SEC);
	(void) SpiExecute(SubsLeaseRows() ? &stmt_expire : &stmt_expire_v14,
					  args, NULL, false, 0);
	for (i = 0; i < SPI_processed; i++)
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("subscription \"%s\" of topic \"%s\" expired",
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2),
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1)),
				 errdetail("Its oldest pending message is older than outbox.subscription_max_lag (%d s): it holds no message back from purge any more, and its claims are refused.",
						   outbox_subscription_max_lag),
				 errhint("Drop it with outbox.unsubscribe and subscribe again.")));
}

/*
 * Drop the default subscription of topic: purge no longer waits for it,
 * and its claims are refused.  A routed topic keeps it: routes deliver
 * the default subscription.  False when it was dropped already.
 */
bool
SubsDropDefault(text *topic, TimestampTz now)
{
	Datum		args[2];
	bool		dropped;

	args[0] = PointerGetDatum(topic);
	args[1] = TimestampTzGetDatum(now);
	SpiConnect();
	if (SpiExecute(StoreRoutesPerSubscription() ? &stmt_default_routed_v15 :
				   &stmt_default_routed, args, NULL, true, 1) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot drop the default subscription of topic \"%s\": the topic has a route",
						text_to_cstring(topic)),
				 errdetail("Routes deliver the default subscription."),
				 errhint("Remove the route first with outbox.unroute(topic).")));
	dropped = SpiExecute(&stmt_default_drop, args, NULL, false, 0) > 0;
	SpiFinish();
	if (dropped)
		obx_dropped_changed();
	return dropped;
}

/*
 * Pause the default subscription of topic until until, or (!pause) resume
 * it: its claims, and its route, take nothing meanwhile; purge still waits
 * for it.  A dropped one cannot be paused.  False when resumed and it was
 * not paused.
 */
bool
SubsPauseDefault(text *topic, bool pause, TimestampTz until)
{
	Datum		args[2];
	bool		changed;

	args[0] = PointerGetDatum(topic);
	args[1] = TimestampTzGetDatum(until);
	if (pause && SubsDefaultDropped(topic))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot pause the default subscription of topic \"%s\": it was dropped",
						text_to_cstring(topic)),
				 errhint("Bring it back with outbox.subscribe(topic, NULL) first.")));
	changed = SpiRun(pause ? &stmt_default_pause : &stmt_default_resume, args, NULL) > 0;
	if (pause && !changed)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot pause the default subscription of topic \"%s\": it was dropped",
						text_to_cstring(topic))));
	if (changed)
		obx_dropped_changed();
	return changed;
}

/*
 * Whether claims of the default subscription of topic take nothing now:
 * it is paused beyond now, or dropped; *until (when not NULL) is the end
 * of the pause (DT_NOEND: none).  Reads nothing while no topic's default
 * subscription is either.
 */
bool
SubsDefaultHeld(text *topic, TimestampTz now, TimestampTz *until)
{
	Datum		args[2];
	Datum		paused;
	bool		isnull;
	bool		held;

	if (!SubsDefaultDropped(NULL))
		return false;
	args[0] = PointerGetDatum(topic);
	args[1] = TimestampTzGetDatum(now);
	held = SpiRunFirstRow(&stmt_default_held, args, NULL, &paused, &isnull, 1);
	if (held && until != NULL)
		*until = isnull ? DT_NOEND : DatumGetTimestampTz(paused);
	return held;
}

/* Bring back the default subscription of topic.  False when it was there. */
bool
SubsRestoreDefault(text *topic)
{
	Datum		args[1];

	args[0] = PointerGetDatum(topic);
	if (SpiRun(&stmt_default_restore, args, NULL) == 0)
		return false;
	obx_dropped_changed();
	return true;
}

/*
 * Whether some topic's default subscription is dropped, as this backend
 * last read it from outbox.subscription (dropped_relid): a claim of a
 * default subscription asks, so the answer is kept, and read again when
 * the table's relation cache entry is dropped, which SubsDropDefault and
 * SubsRestoreDefault make happen in every backend when they commit (and a
 * table made anew has another OID).
 */
static Oid	dropped_relid = InvalidOid;
static bool dropped_any = false;

static void
obx_dropped_forget(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == dropped_relid)
		dropped_relid = InvalidOid;
}

/* outbox.subscription, or InvalidOid before 1.4 */
static Oid
obx_subscription_relid(void)
{
	Oid			nsp = get_namespace_oid("outbox", true);

	return OidIsValid(nsp) ? get_relname_relid("subscription", nsp) : InvalidOid;
}

/* Tell every backend, at commit, that the dropped default subscriptions changed. */
static void
obx_dropped_changed(void)
{
	Oid			relid = obx_subscription_relid();

	if (OidIsValid(relid))
		CacheInvalidateRelcacheByRelid(relid);
	StreamAcrossForget();
}

/*
 * Whether the default subscription of topic was dropped (1.4 tables
 * only); with topic NULL, whether any topic's default subscription was
 * dropped or is paused.  Reads nothing while no topic's is.
 */
bool
SubsDefaultDropped(text *topic)
{
	static bool registered = false;
	Oid			relid = obx_subscription_relid();
	Datum		args[1];
	bool		dropped;

	if (!OidIsValid(relid))
		return false;
	if (relid != dropped_relid)
	{
		if (!registered)
		{
			CacheRegisterRelcacheCallback(obx_dropped_forget, (Datum) 0);
			registered = true;
		}
		SpiConnect();
		dropped_any = SpiExecute(&stmt_default_dropped_any, NULL, NULL, true, 1) > 0;
		SpiFinish();
		dropped_relid = relid;
	}
	if (!dropped_any || topic == NULL)
		return dropped_any;
	args[0] = PointerGetDatum(topic);
	SpiConnect();
	dropped = SpiExecute(&stmt_default_dropped, args, NULL, true, 1) > 0;
	SpiFinish();
	return dropped;
}

/*
 * May a claim of subscription name of topic (NULL: of every topic) run
 * here?  It runs in READ COMMITTED (a claim reads the log as of now, not
 * as of the transaction's start), and needs the horizon of appends in
 * progress, which only a preloaded library keeps.
 */
void
CheckSubscriptionClaim(text *topic, text *name)
{
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a claim of subscription \"%s\" cannot run in a %s transaction",
						text_to_cstring(name),
						IsolationIsSerializable() ? "SERIALIZABLE" : "REPEATABLE READ"),
				 errhint("Claim in a READ COMMITTED transaction.")));
	if (!StreamAvailable() || !GapAvailable())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("claims of subscription \"%s\" need krizaka_outbox in shared_preload_libraries",
						text_to_cstring(name)),
				 errdetail("Without it the server does not track the appends in progress that a subscription must not read past."),
				 errhint("Add krizaka_outbox to shared_preload_libraries and restart the server.")));
}

/*
 * May a claim of the default subscription of topic (NULL: of every topic)
 * run?  Not when it was dropped.
 */
void
CheckDefaultClaim(text *topic)
{
	if (topic != NULL && SubsDefaultDropped(topic))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the default subscription of topic \"%s\" was dropped",
						text_to_cstring(topic)),
				 errhint("Claim through a named subscription, or bring the default one back with outbox.subscribe(topic, NULL).")));
}

/*
 * The subscription a route is made for: the default one, which must not
 * have been dropped, or a named one, made when missing (reading from now
 * on).  Runs as the extension's owner.
 */
void
SubsForRoute(text *topic, text *subscription)
{
	if (subscription == NULL)
	{
		CheckDefaultClaim(topic);
		return;
	}
	if (!StoreRoutesPerSubscription())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the outbox tables of this database have no routes per subscription yet"),
				 errhint("Run ALTER EXTENSION krizaka_outbox UPDATE.")));
	(void) SubsCreate(topic, subscription, false, 0, GetCurrentTimestamp());
}
