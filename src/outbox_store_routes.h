/*-------------------------------------------------------------------------
 *
 * outbox_store_routes.h
 *		The statements on outbox.routes (outbox_store_routes.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_STORE_ROUTES_H
#define OUTBOX_STORE_ROUTES_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "utils/uuid.h"

/* a row of outbox.routes */
typedef struct OutboxRoute
{
	char	   *topic;
	bool		remote;			/* remote command, else NOTIFY */
	char	   *channel;
	char	   *server;
	char	   *command;
	char	   *created_by;		/* the creator's name when the route was made */
	Oid			creator;		/* the creator (created_by_role); InvalidOid:
								 * gone before the update to 1.2 */
	bool		creator_by_role;	/* creator is known; else find created_by */
	TimestampTz created_at;		/* tells one setting of the route from the next */
	TimestampTz paused_until;	/* the breaker's pause; DT_NOBEGIN: none */
	int			consecutive_failures;
} OutboxRoute;

extern void StoreRouteSetNotify(text *topic, text *channel, Oid creator);
extern void StoreRouteSetRemote(text *topic, const char *server,
								const char *command, Oid creator);
extern bool StoreRouteDelete(text *topic);
extern List *StoreRouteList(text *topic);
extern Oid	StoreRouteCreator(const OutboxRoute *route);
extern void StoreRouteSetBreaker(const char *topic, TimestampTz created_at,
								 int consecutive_failures,
								 TimestampTz paused_until, text *last_failure);
extern List *StoreRoutedTopics(void);
extern bool StoreMessageOnChannel(pg_uuid_t *id);

#endif							/* OUTBOX_STORE_ROUTES_H */
