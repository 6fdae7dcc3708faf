/*-------------------------------------------------------------------------
 *
 * outbox_store_routes.c
 *		The statements on outbox.routes: set, delete and list the route of a
 *		topic, list the routed topics, and keep the state of a remote
 *		route's circuit breaker.
 *
 * A topic has at most one route: a NOTIFY channel, or a command run on the
 * remote PostgreSQL database of a foreign server.  The checks of a route
 * happen before it gets here (outbox_api_routes.c); these statements only
 * store and read.  Like every statement of the store they run as
 * SavedStatements (outbox_spi.c) with schema-qualified names.
 *
 * The circuit breaker's columns came with version 1.1, the creator's role
 * (created_by_role) with 1.2.  A database whose extension is older (the new
 * library is installed, ALTER EXTENSION ... UPDATE has not run yet) lacks
 * them: its routes are read and set without them, have no breaker, and
 * their creator is found by name, until the update.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "outbox_spi.h"
#include "outbox_store_routes.h"

/*
 * $2 is the target, 'notify' or 'remote'; the columns of the other are
 * NULL.  A route set again starts with a closed breaker.
 */
#define ROUTE_SET_ON(conflict, role, role_value) \
	"INSERT INTO outbox.routes (topic, target, channel, server, command, created_by, created_at" \
	role ") VALUES ($1, $2, $3, $4, $5, $6, $7" role_value ") " \
	"ON CONFLICT (" conflict ") DO UPDATE SET target = excluded.target, channel = excluded.channel," \
	" server = excluded.server, command = excluded.command," \
	" created_by = excluded.created_by, created_at = excluded.created_at"
#define ROUTE_SET(role, role_value) ROUTE_SET_ON("topic", role, role_value)
#define ROUTE_SET_ARGS \
	8, {TEXTOID, TEXTOID, TEXTOID, NAMEOID, TEXTOID, NAMEOID, TIMESTAMPTZOID, REGROLEOID}
#define ROUTE_SET_BREAKER \
	", paused_until = NULL, consecutive_failures = 0, last_failure = NULL"

SAVED_STATEMENT(stmt_route_set) = {
	ROUTE_SET(", created_by_role", ", $8") ROUTE_SET_BREAKER
	", created_by_role = excluded.created_by_role",
	SPI_OK_INSERT,
	ROUTE_SET_ARGS
};

/* 1.3: an HTTP route's url, CA file and the fingerprint of its secret */
SAVED_STATEMENT(stmt_route_set_v13) = {
	ROUTE_SET(", created_by_role, url, ca_file, secret_fingerprint", ", $8, $9, $10, $11")
	ROUTE_SET_BREAKER ", created_by_role = excluded.created_by_role, url = excluded.url,"
	" ca_file = excluded.ca_file, secret_fingerprint = excluded.secret_fingerprint",
	SPI_OK_INSERT,
	11, {TEXTOID, TEXTOID, TEXTOID, NAMEOID, TEXTOID, NAMEOID, TIMESTAMPTZOID, REGROLEOID,
		TEXTOID, TEXTOID, TEXTOID}
};

/* 1.5: a route per topic and subscription ($12; NULL: the default one) */
SAVED_STATEMENT(stmt_route_set_v15) = {
	ROUTE_SET_ON("topic, subscription",
				 ", created_by_role, url, ca_file, secret_fingerprint, subscription",
				 ", $8, $9, $10, $11, $12")
	ROUTE_SET_BREAKER ", created_by_role = excluded.created_by_role, url = excluded.url,"
	" ca_file = excluded.ca_file, secret_fingerprint = excluded.secret_fingerprint",
	SPI_OK_INSERT,
	12, {TEXTOID, TEXTOID, TEXTOID, NAMEOID, TEXTOID, NAMEOID, TIMESTAMPTZOID, REGROLEOID,
		TEXTOID, TEXTOID, TEXTOID, TEXTOID}
};

SAVED_STATEMENT(stmt_route_set_v11) = {
	ROUTE_SET("", "") ROUTE_SET_BREAKER,
	SPI_OK_INSERT,
	ROUTE_SET_ARGS
};

SAVED_STATEMENT(stmt_route_set_v10) = {
	ROUTE_SET("", ""),
	SPI_OK_INSERT,
	ROUTE_SET_ARGS
};

SAVED_STATEMENT(stmt_route_delete) = {
	"DELETE FROM outbox.routes WHERE topic OPERATOR(pg_catalog.=) $1",
	SPI_OK_DELETE,
	1, {TEXTOID}
};

SAVED_STATEMENT(stmt_route_delete_v15) = {
	"DELETE FROM outbox.routes WHERE topic OPERATOR(pg_catalog.=) $1"
	" AND subscription IS NOT DISTINCT FROM $2",
	SPI_OK_DELETE,
	2, {TEXTOID, TEXTOID}
};

/* Read whole and often: the planner may scan the small table as it likes */
SAVED_STATEMENT(stmt_routed_topics) = {
	"SELECT topic FROM outbox.routes",
	SPI_OK_SELECT,
	0, {InvalidOid},
	OBX_SCANS_ANY
};

/*
 * breaker names the breaker's columns, or what stands for them in 1.0;
 * role the creator's role and whether it is known (a route written by hand
 * into the table, without created_by_role, or a table of 1.0 or 1.1, has
 * its creator found by name)
 */
#define ROUTE_LIST(breaker, role) \
	"SELECT topic, target, channel, server, command, created_by, created_at, " \
	breaker ", " role " FROM outbox.routes " \
	"WHERE $1 IS NULL OR topic OPERATOR(pg_catalog.=) $1 ORDER BY topic"
#define ROUTE_LIST_ROLE \
	"created_by_role::pg_catalog.oid, created_by_role IS NOT NULL"
#define ROUTE_LIST_NO_ROLE	"NULL::pg_catalog.oid, false"

SAVED_STATEMENT(stmt_route_list) = {
	ROUTE_LIST("paused_until, consecutive_failures",
			   "created_by_role::pg_catalog.oid, created_by_role IS NOT NULL"),
	SPI_OK_SELECT,
	1, {TEXTOID}
};

SAVED_STATEMENT(stmt_route_list_v13) = {
	ROUTE_LIST("paused_until, consecutive_failures",
			   "created_by_role::pg_catalog.oid, created_by_role IS NOT NULL, url, ca_file"),
	SPI_OK_SELECT,
	1, {TEXTOID}
};

SAVED_STATEMENT(stmt_route_list_v15) = {
	ROUTE_LIST("paused_until, consecutive_failures",
			   ROUTE_LIST_ROLE ", url, ca_file, subscription") ", subscription NULLS FIRST",
	SPI_OK_SELECT,
	1, {TEXTOID}
};

SAVED_STATEMENT(stmt_route_list_v11) = {
	ROUTE_LIST("paused_until, consecutive_failures", ROUTE_LIST_NO_ROLE),
	SPI_OK_SELECT,
	1, {TEXTOID}
};

SAVED_STATEMENT(stmt_route_list_v10) = {
	ROUTE_LIST("NULL::pg_catalog.timestamptz, 0", ROUTE_LIST_NO_ROLE),
	SPI_OK_SELECT,
	1, {TEXTOID}
};

/*
 * The breaker of the route of $1, as long as it is the setting made at $2:
 * a route set again meanwhile starts afresh.  A row someone else has
 * locked is skipped rather than waited for.
 */
SAVED_STATEMENT(stmt_route_breaker) = {
	"UPDATE outbox.routes SET consecutive_failures = $3, paused_until = $4, last_failure = $5 "
	"WHERE topic OPERATOR(pg_catalog.=) ANY (ARRAY("
	" SELECT r.topic FROM outbox.routes r WHERE r.topic OPERATOR(pg_catalog.=) $1"
	" AND r.created_at OPERATOR(pg_catalog.=) $2 FOR UPDATE SKIP LOCKED))",
	SPI_OK_UPDATE,
	5, {TEXTOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TEXTOID}
};

/* 1.5: the route of $1 and subscription $6 */
SAVED_STATEMENT(stmt_route_breaker_v15) = {
	"UPDATE outbox.routes SET consecutive_failures = $3, paused_until = $4, last_failure = $5 "
	"WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
	" SELECT r.ctid FROM outbox.routes r WHERE r.topic OPERATOR(pg_catalog.=) $1"
	" AND r.subscription IS NOT DISTINCT FROM $6"
	" AND r.created_at OPERATOR(pg_catalog.=) $2 FOR UPDATE OF r SKIP LOCKED))",
	SPI_OK_UPDATE,
	6, {TEXTOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TEXTOID, TEXTOID}
};

/* Whether the message's topic is routed to a NOTIFY channel */
SAVED_STATEMENT(stmt_message_on_channel) = {
	"SELECT 1 FROM outbox.message m JOIN outbox.routes r"
	" ON r.topic OPERATOR(pg_catalog.=) m.topic "
	"WHERE m.id OPERATOR(pg_catalog.=) $1 AND r.target OPERATOR(pg_catalog.=) 'notify'",
	SPI_OK_SELECT,
	1, {UUIDOID}
};

/* The arguments of stmt_route_set_v13, of which the others take the first 8 */
typedef struct RouteArgs
{
	Datum		values[12];
	char		nulls[12];
	NameData	server;
	NameData	creator;
} RouteArgs;

static bool obx_routes_have_breaker(void);
static bool obx_routes_have_role(void);
static bool obx_routes_have_http(void);
static SavedStatement *obx_route_set(void);
static void obx_route_args(RouteArgs *a, text *topic, text *subscription,
						   const char *target, Oid creator);

/*
 * Whether outbox.routes has the breaker's columns (version 1.1 and later:
 * see the header comment).
 */
static bool
obx_routes_have_breaker(void)
{
	Oid			routes = get_relname_relid("routes",
										   get_namespace_oid("outbox", false));

	return OidIsValid(routes) &&
		get_attnum(routes, "consecutive_failures") != InvalidAttrNumber;
}

/*
 * Whether outbox.routes has the creator's role (version 1.2 and later).
 */
static bool
obx_routes_have_role(void)
{
	Oid			routes = get_relname_relid("routes",
										   get_namespace_oid("outbox", false));

	return OidIsValid(routes) &&
		get_attnum(routes, "created_by_role") != InvalidAttrNumber;
}

/*
 * Whether outbox.routes has the columns of HTTP routes (version 1.3 and
 * later).
 */
static bool
obx_routes_have_http(void)
{
	Oid			routes = get_relname_relid("routes",
										   get_namespace_oid("outbox", false));

	return OidIsValid(routes) && get_attnum(routes, "url") != InvalidAttrNumber;
}

/*
 * Whether outbox.routes has routes per subscription (version 1.5 and
 * later).
 */
bool
StoreRoutesPerSubscription(void)
{
	Oid			routes = get_relname_relid("routes",
										   get_namespace_oid("outbox", false));

	return OidIsValid(routes) &&
		get_attnum(routes, "subscription") != InvalidAttrNumber;
}

/* The statement that sets a route, for the version of the tables */
static SavedStatement *
obx_route_set(void)
{
	if (!obx_routes_have_breaker())
		return &stmt_route_set_v10;
	if (StoreRoutesPerSubscription())
		return &stmt_route_set_v15;
	if (obx_routes_have_http())
		return &stmt_route_set_v13;
	return obx_routes_have_role() ? &stmt_route_set : &stmt_route_set_v11;
}

/*
 * Start the arguments of a route of topic's subscription (NULL: the
 * default one) to target made by creator, with no channel, server or
 * command.
 */
static void
obx_route_args(RouteArgs *a, text *topic, text *subscription,
			   const char *target, Oid creator)
{
	memset(a->nulls, ' ', sizeof(a->nulls));
	a->values[0] = PointerGetDatum(topic);
	a->values[1] = CStringGetTextDatum(target);
	a->values[2] = a->values[3] = a->values[4] = (Datum) 0;
	a->nulls[2] = a->nulls[3] = a->nulls[4] = 'n';
	namestrcpy(&a->creator, GetUserNameFromId(creator, false));
	a->values[5] = NameGetDatum(&a->creator);
	a->values[6] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	a->values[7] = ObjectIdGetDatum(creator);
	a->values[8] = a->values[9] = a->values[10] = (Datum) 0;
	a->nulls[8] = a->nulls[9] = a->nulls[10] = 'n';
	a->values[11] = PointerGetDatum(subscription);
	a->nulls[11] = subscription == NULL ? 'n' : ' ';
	if (subscription != NULL && !StoreRoutesPerSubscription())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the outbox tables of this database have no routes per subscription yet"),
				 errhint("Run ALTER EXTENSION krizaka_outbox UPDATE.")));
}

/*
 * Create or replace the route of topic's subscription (NULL: the default
 * one): pg_notify on channel.
 */
void
StoreRouteSetNotify(text *topic, text *subscription, text *channel, Oid creator)
{
	RouteArgs	a;

	obx_route_args(&a, topic, subscription, "notify", creator);
	a.values[2] = PointerGetDatum(channel);
	a.nulls[2] = ' ';
	(void) SpiRun(obx_route_set(), a.values, a.nulls);
}

/*
 * Create or replace the route of topic's subscription (NULL: the default
 * one): command run on the foreign server.
 */
void
StoreRouteSetRemote(text *topic, text *subscription, const char *server,
					const char *command, Oid creator)
{
	RouteArgs	a;

	obx_route_args(&a, topic, subscription, "remote", creator);
	namestrcpy(&a.server, server);
	a.values[3] = NameGetDatum(&a.server);
	a.nulls[3] = ' ';
	a.values[4] = CStringGetTextDatum(command);
	a.nulls[4] = ' ';
	(void) SpiRun(obx_route_set(), a.values, a.nulls);
}

/*
 * Create or replace the route of topic's subscription (NULL: the default
 * one): POST to url, verified with ca_file
 * (NULL: the system's store), signed with the secret whose fingerprint is
 * given (NULL: unsigned).  The secret itself is stored apart
 * (StoreHttpSetSecrets).  Needs the tables of 1.3.
 */
void
StoreRouteSetHttp(text *topic, text *subscription, const char *url,
				  const char *ca_file, const char *fingerprint, Oid creator)
{
	RouteArgs	a;

	if (!obx_routes_have_http())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the outbox tables of this database have no HTTP routes yet"),
				 errhint("Run ALTER EXTENSION krizaka_outbox UPDATE.")));
	obx_route_args(&a, topic, subscription, "http", creator);
	a.values[8] = CStringGetTextDatum(url);
	a.nulls[8] = ' ';
	if (ca_file != NULL)
	{
		a.values[9] = CStringGetTextDatum(ca_file);
		a.nulls[9] = ' ';
	}
	if (fingerprint != NULL)
	{
		a.values[10] = CStringGetTextDatum(fingerprint);
		a.nulls[10] = ' ';
	}
	(void) SpiRun(obx_route_set(), a.values, a.nulls);
}

/*
 * Remove the route of topic's subscription (NULL: the default one); false
 * when there was none.
 */
bool
StoreRouteDelete(text *topic, text *subscription)
{
	Datum		args[2];
	char		nulls[2] = {' ', subscription == NULL ? 'n' : ' '};

	args[0] = PointerGetDatum(topic);
	args[1] = PointerGetDatum(subscription);
	if (!StoreRoutesPerSubscription())
		return subscription == NULL && SpiRun(&stmt_route_delete, args, NULL) > 0;
	return SpiRun(&stmt_route_delete_v15, args, nulls) > 0;
}

/* The routes (of topic, or all when NULL), in topic order, as OutboxRoutes. */
List *
StoreRouteList(text *topic)
{
	MemoryContext caller = CurrentMemoryContext;
	Datum		args[1];
	char		nulls[1];
	List	   *routes = NIL;
	uint64		i;
	uint64		n;

	args[0] = topic ? PointerGetDatum(topic) : (Datum) 0;
	nulls[0] = topic ? ' ' : 'n';

	SpiConnect();
	n = SpiExecute(!obx_routes_have_breaker() ? &stmt_route_list_v10 :
				   StoreRoutesPerSubscription() ? &stmt_route_list_v15 :
				   obx_routes_have_http() ? &stmt_route_list_v13 :
				   obx_routes_have_role() ? &stmt_route_list : &stmt_route_list_v11,
				   args, nulls, true, 0);
	for (i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext spi = MemoryContextSwitchTo(caller);
		OutboxRoute *r = palloc0(sizeof(OutboxRoute));
		char	   *target;
		bool		isnull;
		Datum		paused;

		r->topic = SPI_getvalue(tup, desc, 1);
		target = SPI_getvalue(tup, desc, 2);
		r->remote = (strcmp(target, "remote") == 0);
		r->http = (strcmp(target, "http") == 0);
		r->channel = SPI_getvalue(tup, desc, 3);
		r->server = SPI_getvalue(tup, desc, 4);
		r->command = SPI_getvalue(tup, desc, 5);
		r->created_by = SPI_getvalue(tup, desc, 6);
		r->created_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 7, &isnull));
		paused = SPI_getbinval(tup, desc, 8, &isnull);
		r->paused_until = isnull ? DT_NOBEGIN : DatumGetTimestampTz(paused);
		r->consecutive_failures = DatumGetInt32(SPI_getbinval(tup, desc, 9, &isnull));
		r->creator = DatumGetObjectId(SPI_getbinval(tup, desc, 10, &isnull));
		if (isnull)
			r->creator = InvalidOid;
		r->creator_by_role = DatumGetBool(SPI_getbinval(tup, desc, 11, &isnull));
		if (desc->natts >= 13)
		{
			r->url = SPI_getvalue(tup, desc, 12);
			r->ca_file = SPI_getvalue(tup, desc, 13);
		}
		if (desc->natts >= 14)
			r->subscription = SPI_getvalue(tup, desc, 14);
		routes = lappend(routes, r);
		MemoryContextSwitchTo(spi);
	}
	SpiFinish();
	return routes;
}

/*
 * Store the breaker of a remote route: consecutive_failures, paused_until
 * (DT_NOBEGIN: none) and last_failure (NULL: none), unless the route was
 * set again since created_at, its row is locked, or it has no breaker
 * (1.0).
 */
void
StoreRouteSetBreaker(const char *topic, const char *subscription,
					 TimestampTz created_at, int consecutive_failures,
					 TimestampTz paused_until, text *last_failure)
{
	Datum		args[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

	if (!obx_routes_have_breaker())
		return;
	args[0] = CStringGetTextDatum(topic);
	args[1] = TimestampTzGetDatum(created_at);
	args[2] = Int32GetDatum(consecutive_failures);
	args[3] = TimestampTzGetDatum(paused_until);
	nulls[3] = paused_until == DT_NOBEGIN ? 'n' : ' ';
	args[4] = PointerGetDatum(last_failure);
	nulls[4] = last_failure == NULL ? 'n' : ' ';
	if (!StoreRoutesPerSubscription())
	{
		(void) SpiRun(&stmt_route_breaker, args, nulls);
		return;
	}
	args[5] = subscription ? CStringGetTextDatum(subscription) : (Datum) 0;
	nulls[5] = subscription ? ' ' : 'n';
	(void) SpiRun(&stmt_route_breaker_v15, args, nulls);
}

/*
 * The routed topics, as C strings in the current memory context, read with
 * the latest snapshot so that a route committed after this transaction's
 * snapshot is seen (the caller caches the list across transactions).  An
 * extension without its routes table yields an empty list.
 */
List *
StoreRoutedTopics(void)
{
	MemoryContext caller = CurrentMemoryContext;
	List	   *topics = NIL;
	uint64		i;
	uint64		n;

	if (!OidIsValid(get_namespace_oid("outbox", true)))
		return NIL;

	SpiConnect();
	n = SpiExecuteLatest(&stmt_routed_topics, NULL, NULL);
	for (i = 0; i < n; i++)
	{
		char	   *t = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		MemoryContext spi = MemoryContextSwitchTo(caller);

		topics = lappend(topics, pstrdup(t));
		MemoryContextSwitchTo(spi);
	}
	SpiFinish();
	return topics;
}

/*
 * Is the message with this id (still) of a topic routed to a NOTIFY
 * channel?  Those are the envelopes that listeners are sent, and may read
 * whole by id.
 */
bool
StoreMessageOnChannel(pg_uuid_t *id)
{
	Datum		args[1];
	Datum		one;
	bool		isnull;

	args[0] = UUIDPGetDatum(id);
	return SpiRunFirstRow(&stmt_message_on_channel, args, NULL, &one, &isnull, 1);
}

/*
 * The role that made the route: the one of created_by_role, still named
 * created_by (a role made later under a dropped one's name is another, and
 * a renamed one is no longer the creator), or found by name when the table
 * does not say (tables older than 1.2, a row written by hand).  InvalidOid
 * if that role is gone.
 */
Oid
StoreRouteCreator(const OutboxRoute *route)
{
	char	   *name;

	if (!route->creator_by_role)
		return get_role_oid(route->created_by, true);
	if (!OidIsValid(route->creator))
		return InvalidOid;
	name = GetUserNameFromId(route->creator, true);
	if (name == NULL || strcmp(name, route->created_by) != 0)
		return InvalidOid;
	return route->creator;
}
