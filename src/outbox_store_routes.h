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
#include "utils/jsonb.h"
#include "utils/uuid.h"

/* a row of outbox.routes */
typedef struct OutboxRoute
{
	char	   *topic;
	char	   *subscription;	/* the named subscription it delivers; NULL:
								 * the topic's default one */
	bool		remote;			/* remote command */
	bool		http;			/* HTTP endpoint; neither: NOTIFY */
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
	char	   *url;			/* of an HTTP route */
	char	   *ca_file;		/* of an HTTP route; NULL: the system's store */
} OutboxRoute;

/* what an HTTP route signs with and sends besides (outbox.route_secrets) */
typedef struct HttpRouteSecrets
{
	char	   *secret;			/* NULL: unsigned */
	char	   *previous_secret;	/* signs too until previous_until */
	TimestampTz previous_until;
	List	   *headers;		/* "Name: value" lines */
} HttpRouteSecrets;

/* the counts of one batch of an HTTP route (outbox.route_http_stats) */
typedef struct HttpRouteCounts
{
	int64		calls[6];		/* by class: [0] no answer, [2..5] 2xx..5xx */
	double		latency_seconds;
	int			last_status;
	double		last_latency_ms;
	TimestampTz last_call_at;	/* 0: no call */
} HttpRouteCounts;

extern bool StoreRoutesPerSubscription(void);
extern void StoreRouteSetNotify(text *topic, text *subscription, text *channel,
								Oid creator);
extern void StoreRouteSetRemote(text *topic, text *subscription, const char *server,
								const char *command, Oid creator);
extern void StoreRouteSetHttp(text *topic, text *subscription, const char *url,
							  const char *ca_file, const char *fingerprint, Oid creator);
extern bool StoreRouteDelete(text *topic, text *subscription);
extern List *StoreRouteList(text *topic);
extern Oid	StoreRouteCreator(const OutboxRoute *route);
extern void StoreRouteSetBreaker(const char *topic, const char *subscription,
								 TimestampTz created_at, int consecutive_failures,
								 TimestampTz paused_until, text *last_failure);
extern List *StoreRoutedTopics(void);
extern bool StoreMessageOnChannel(pg_uuid_t *id);

/* HTTP routes' secrets and counters (outbox_store_http.c) */
extern void StoreHttpSetSecrets(text *topic, text *subscription, const char *secret,
								Jsonb *headers);
extern void StoreHttpDropSecrets(text *topic, text *subscription);
extern void StoreHttpRotateSecret(text *topic, text *subscription, const char *secret,
								  const char *fingerprint, TimestampTz keep_until);
extern HttpRouteSecrets *StoreHttpSecrets(const char *topic, const char *subscription);
extern void StoreHttpCount(const char *topic, const char *subscription,
						   const HttpRouteCounts *counts);

#endif							/* OUTBOX_STORE_ROUTES_H */
