/*-------------------------------------------------------------------------
 *
 * outbox_api_routes.c
 *		The SQL-callable functions that say where a topic is delivered:
 *		route_notify, route_remote and unroute.
 *
 * A topic has at most one route, kept in outbox.routes: a NOTIFY channel,
 * or a command run on a remote PostgreSQL database named by a foreign
 * server.  Routes are checked on the way in, so a bad channel, an unknown
 * server or a command that does not parse is refused with nothing stored
 * (outbox_store_routes.c stores them).  Setting a route wakes the worker,
 * which delivers the topic from then on.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

#include "outbox.h"
#include "outbox_identity.h"
#include "outbox_store_routes.h"
#include "outbox_validate.h"

PG_FUNCTION_INFO_V1(outbox_route_notify);
PG_FUNCTION_INFO_V1(outbox_route_remote);
PG_FUNCTION_INFO_V1(outbox_unroute);

/* outbox.route_notify(topic, channel): deliver topic by pg_notify */
Datum
outbox_route_notify(PG_FUNCTION_ARGS)
{
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	text	   *channel = CheckName(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "channel");

	CheckChannel(channel);

	/* a SECURITY DEFINER function: the session's role made the route */
	StoreRouteSetNotify(topic, channel, GetOuterUserId());
	RoutesChangedAtCommit();
	PG_RETURN_VOID();
}

/*
 * outbox.route_remote(topic, server, command): deliver topic by running
 * command on server.  Runs as its caller, whose rights on the server are
 * checked, and switches to the extension owner only to store the route.
 */
Datum
outbox_route_remote(PG_FUNCTION_ARGS)
{
	Oid			caller = GetUserId();
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	char	   *server = CheckServerName(PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	char	   *command = CheckCommand(PG_GETARG_DATUM(2), PG_ARGISNULL(2));
	SavedIdentity save;

	RemoteCheckCommand(command);
	RemoteCheckRoute(server, caller);

	IdentityBecomeExtensionOwner(&save);
	StoreRouteSetRemote(topic, server, command, caller);
	IdentityRestore(&save);

	RoutesChangedAtCommit();
	PG_RETURN_VOID();
}

/* outbox.unroute(topic): remove the route; false when there was none */
Datum
outbox_unroute(PG_FUNCTION_ARGS)
{
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	bool		removed = StoreRouteDelete(topic);

	if (removed)
		RoutesChangedAtCommit();
	PG_RETURN_BOOL(removed);
}
