/*-------------------------------------------------------------------------
 *
 * outbox_store_routes.c
 *		The statements on outbox.routes: set, delete and list the route of a
 *		topic, and list the routed topics.
 *
 * A topic has at most one route: a NOTIFY channel, or a command run on the
 * remote PostgreSQL database of a foreign server.  The checks of a route
 * happen before it gets here (outbox_api_routes.c); these statements only
 * store and read.  Like every statement of the store they run as
 * SavedStatements (outbox_spi.c) with schema-qualified names.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/uuid.h"

#include "outbox_spi.h"
#include "outbox_store_routes.h"

/* $2 is the target, 'notify' or 'remote'; the columns of the other are NULL */
static SavedStatement stmt_route_set = {
	"INSERT INTO outbox.routes (topic, target, channel, server, command, created_by, created_at) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7) "
	"ON CONFLICT (topic) DO UPDATE SET target = excluded.target, channel = excluded.channel,"
	" server = excluded.server, command = excluded.command,"
	" created_by = excluded.created_by, created_at = excluded.created_at",
	SPI_OK_INSERT,
	7, {TEXTOID, TEXTOID, TEXTOID, NAMEOID, TEXTOID, NAMEOID, TIMESTAMPTZOID}
};

static SavedStatement stmt_route_delete = {
	"DELETE FROM outbox.routes WHERE topic OPERATOR(pg_catalog.=) $1",
	SPI_OK_DELETE,
	1, {TEXTOID}
};

/* Read whole and often: the planner may scan the small table as it likes */
static SavedStatement stmt_routed_topics = {
	"SELECT topic FROM outbox.routes",
	SPI_OK_SELECT,
	0, {InvalidOid},
	OBX_SCANS_ANY
};

static SavedStatement stmt_route_list = {
	"SELECT topic, target, channel, server, command, created_by FROM outbox.routes "
	"WHERE $1 IS NULL OR topic OPERATOR(pg_catalog.=) $1 ORDER BY topic",
	SPI_OK_SELECT,
	1, {TEXTOID}
};

/* Whether the message's topic is routed to a NOTIFY channel */
static SavedStatement stmt_message_on_channel = {
	"SELECT 1 FROM outbox.message m JOIN outbox.routes r"
	" ON r.topic OPERATOR(pg_catalog.=) m.topic "
	"WHERE m.id OPERATOR(pg_catalog.=) $1 AND r.target OPERATOR(pg_catalog.=) 'notify'",
	SPI_OK_SELECT,
	1, {UUIDOID}
};

/* The arguments of stmt_route_set */
typedef struct RouteArgs
{
	Datum		values[7];
	char		nulls[7];
	NameData	server;
	NameData	creator;
} RouteArgs;

static void obx_route_args(RouteArgs *a, text *topic, const char *target,
						   Oid creator);

/*
 * Start the arguments of a route of topic to target made by creator, with
 * no channel, server or command.
 */
static void
obx_route_args(RouteArgs *a, text *topic, const char *target, Oid creator)
{
	memset(a->nulls, ' ', sizeof(a->nulls));
	a->values[0] = PointerGetDatum(topic);
	a->values[1] = CStringGetTextDatum(target);
	a->values[2] = a->values[3] = a->values[4] = (Datum) 0;
	a->nulls[2] = a->nulls[3] = a->nulls[4] = 'n';
	namestrcpy(&a->creator, GetUserNameFromId(creator, false));
	a->values[5] = NameGetDatum(&a->creator);
	a->values[6] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
}

/* Create or replace the route of topic: pg_notify on channel. */
void
StoreRouteSetNotify(text *topic, text *channel, Oid creator)
{
	RouteArgs	a;

	obx_route_args(&a, topic, "notify", creator);
	a.values[2] = PointerGetDatum(channel);
	a.nulls[2] = ' ';
	(void) SpiRun(&stmt_route_set, a.values, a.nulls);
}

/* Create or replace the route of topic: command run on the foreign server. */
void
StoreRouteSetRemote(text *topic, const char *server, const char *command,
					Oid creator)
{
	RouteArgs	a;

	obx_route_args(&a, topic, "remote", creator);
	namestrcpy(&a.server, server);
	a.values[3] = NameGetDatum(&a.server);
	a.nulls[3] = ' ';
	a.values[4] = CStringGetTextDatum(command);
	a.nulls[4] = ' ';
	(void) SpiRun(&stmt_route_set, a.values, a.nulls);
}

/* Remove the route of topic; false when there was none. */
bool
StoreRouteDelete(text *topic)
{
	Datum		args[1];

	args[0] = PointerGetDatum(topic);
	return SpiRun(&stmt_route_delete, args, NULL) > 0;
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
	n = SpiExecute(&stmt_route_list, args, nulls, true, 0);
	for (i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext spi = MemoryContextSwitchTo(caller);
		OutboxRoute *r = palloc0(sizeof(OutboxRoute));
		char	   *target;

		r->topic = SPI_getvalue(tup, desc, 1);
		target = SPI_getvalue(tup, desc, 2);
		r->remote = (strcmp(target, "remote") == 0);
		r->channel = SPI_getvalue(tup, desc, 3);
		r->server = SPI_getvalue(tup, desc, 4);
		r->command = SPI_getvalue(tup, desc, 5);
		r->created_by = SPI_getvalue(tup, desc, 6);
		routes = lappend(routes, r);
		MemoryContextSwitchTo(spi);
	}
	SpiFinish();
	return routes;
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
