/*-------------------------------------------------------------------------
 *
 * outbox_api_routes.c
 *		The SQL-callable functions that say where a topic is delivered:
 *		route_notify, route_remote and unroute (route_http is in
 *		outbox_api_http.c); and check_route, which
 *		tries a route without delivering anything.
 *
 * A topic has at most one route per subscription, kept in outbox.routes: a
 * NOTIFY channel, or a command run on a remote PostgreSQL database named
 * by a foreign server.  The functions of 1.4 and earlier route the topic's
 * default subscription; those with a last argument subscription (1.5)
 * route the one named there (NULL: the default one), and make a named
 * subscription that does not exist yet, reading from now on.  A named
 * subscription with a route belongs to it: pull claims of it are refused.  Routes are checked on the way in, so a bad channel, an unknown
 * server or a command that does not parse is refused with nothing stored
 * (outbox_store_routes.c stores them).  Setting a route wakes the worker,
 * which delivers the topic from then on.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_identity.h"
#include "outbox_store_routes.h"
#include "outbox_subs.h"
#include "outbox_validate.h"

PG_FUNCTION_INFO_V1(outbox_route_notify);
PG_FUNCTION_INFO_V1(outbox_route_remote);
PG_FUNCTION_INFO_V1(outbox_unroute);
PG_FUNCTION_INFO_V1(outbox_check_route);

static void obx_check_row(ReturnSetInfo *rsinfo, const char *step, bool ok,
						  const char *sqlstate, const char *message);

/*
 * outbox.route_notify(topic, channel[, subscription]): deliver topic (its
 * subscription) by pg_notify
 */
Datum
outbox_route_notify(PG_FUNCTION_ARGS)
{
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	text	   *channel = CheckName(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "channel");
	text	   *subscription = CheckSubscription(fcinfo, 2);

	CheckChannel(channel);
	SubsForRoute(topic, subscription);

	/* a SECURITY DEFINER function: the session's role made the route */
	StoreRouteSetNotify(topic, subscription, channel, GetOuterUserId());
	StoreHttpDropSecrets(topic, subscription);
	RoutesChangedAtCommit();
	PG_RETURN_VOID();
}

/*
 * outbox.route_remote(topic, server, command[, subscription]): deliver
 * topic (its subscription) by running command on server.  Runs as its caller, whose rights on the server are
 * checked, and switches to the extension owner only to store the route.
 */
Datum
outbox_route_remote(PG_FUNCTION_ARGS)
{
	Oid			caller = GetUserId();
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	char	   *server = CheckServerName(PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	char	   *command = CheckCommand(PG_GETARG_DATUM(2), PG_ARGISNULL(2));
	text	   *subscription = CheckSubscription(fcinfo, 3);
	SavedIdentity save;

	RemoteCheckCommand(command);
	RemoteCheckRoute(server, caller);

	IdentityBecomeExtensionOwner(&save);
	SubsForRoute(topic, subscription);
	StoreRouteSetRemote(topic, subscription, server, command, caller);
	StoreHttpDropSecrets(topic, subscription);
	IdentityRestore(&save);

	RoutesChangedAtCommit();
	PG_RETURN_VOID();
}

/*
 * outbox.unroute(topic[, subscription]): remove the route of topic's
 * subscription (NULL: the default one); false when there was none.  A
 * named subscription stays, for pull workers to claim from then on.
 */
Datum
outbox_unroute(PG_FUNCTION_ARGS)
{
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	text	   *subscription = CheckSubscription(fcinfo, 1);
	bool		removed = StoreRouteDelete(topic, subscription);

	StoreHttpDropSecrets(topic, subscription);

	if (removed)
		RoutesChangedAtCommit();
	PG_RETURN_BOOL(removed);
}

/*
 * outbox.check_route(topic): try the topic's route as delivery would,
 * delivering nothing, and return one row per step (step, ok, sqlstate,
 * message): 'route', then for a NOTIFY route 'channel', for a remote route
 * 'server', 'connect' and 'prepare' (outbox_remote_probe.c), up to the
 * first step that failed.  A topic without a route is an error (42704).
 * Only the route's creator, a superuser or a member of the extension's
 * owner may check it (42501 otherwise): the check connects with the
 * creator's user mapping.  Runs as its caller, as route_remote does, and
 * reads the route as the extension owner.
 */
Datum
outbox_check_route(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			caller = GetUserId();
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	text	   *subscription = CheckSubscription(fcinfo, 1);
	char	   *topic_str = text_to_cstring(topic);
	char	   *sub_str = subscription ? text_to_cstring(subscription) : NULL;
	SavedIdentity save;
	Oid			owner;
	List	   *routes;
	OutboxRoute *route = NULL;
	Oid			creator;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);

	IdentityBecomeExtensionOwner(&save);
	owner = GetUserId();
	routes = StoreRouteList(topic);
	IdentityRestore(&save);

	foreach(lc, routes)
	{
		OutboxRoute *r = lfirst(lc);

		if ((r->subscription == NULL) == (sub_str == NULL) &&
			(sub_str == NULL || strcmp(r->subscription, sub_str) == 0))
			route = r;
	}
	if (route == NULL && sub_str == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("topic \"%s\" has no route", topic_str),
				 errhint("Make one with outbox.route_notify, outbox.route_remote or outbox.route_http.")));
	if (route == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("subscription \"%s\" of topic \"%s\" has no route", sub_str, topic_str),
				 errhint("Make one with outbox.route_notify or outbox.route_remote.")));

	creator = StoreRouteCreator(route);
	if (caller != creator &&
		!superuser_arg(caller) && !has_privs_of_role(caller, owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to check the route of topic \"%s\"",
						topic_str),
				 errdetail("Only the role that made the route, a superuser or a member of the extension's owner may check it.")));

	if (route->http)
	{
		obx_check_row(rsinfo, "route", true, NULL,
					  psprintf("topic \"%s\" is delivered to %s", topic_str, route->url));
		obx_check_row(rsinfo, "url", true, NULL,
					  "the address of an HTTP route is resolved and checked at each call");
		return (Datum) 0;
	}
	if (!route->remote)
	{
		obx_check_row(rsinfo, "route", true, NULL,
					  psprintf("topic \"%s\" is delivered by NOTIFY", topic_str));
		obx_check_row(rsinfo, "channel", true, NULL,
					  psprintf("channel \"%s\"; a NOTIFY route has nothing remote to check",
							   route->channel));
		return (Datum) 0;
	}

	obx_check_row(rsinfo, "route", true, NULL,
				  psprintf("topic \"%s\" is delivered to server \"%s\", made by role \"%s\"",
						   topic_str, route->server, route->created_by));
	foreach(lc, RemoteProbeRoute(route->server, creator,
								 route->created_by, route->command))
	{
		RouteCheckStep *step = lfirst(lc);

		obx_check_row(rsinfo, step->step, step->ok, step->sqlstate,
					  step->message);
	}
	return (Datum) 0;
}

/* One row of check_route's result. */
static void
obx_check_row(ReturnSetInfo *rsinfo, const char *step, bool ok,
			  const char *sqlstate, const char *message)
{
	Datum		values[4];
	bool		nulls[4] = {false, false, sqlstate == NULL, message == NULL};

	values[0] = CStringGetTextDatum(step);
	values[1] = BoolGetDatum(ok);
	values[2] = sqlstate ? CStringGetTextDatum(sqlstate) : (Datum) 0;
	values[3] = message ? CStringGetTextDatum(message) : (Datum) 0;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}
