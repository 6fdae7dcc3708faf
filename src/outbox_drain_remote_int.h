/*-------------------------------------------------------------------------
 *
 * outbox_drain_remote_int.h
 *		What the files of a batch of a remote or HTTP route share, and
 *		nothing else includes: the batch itself.
 *
 *	outbox_drain_remote.c	its claim, its calls one message after the
 *							other, the outcome of each noted; the route's
 *							circuit breaker
 *	outbox_drain_outcomes.c	the outcomes recorded: together when the batch
 *							is through, message by message when its landing
 *							failed
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_DRAIN_REMOTE_INT_H
#define OUTBOX_DRAIN_REMOTE_INT_H

#include "outbox_drain_int.h"
#include "outbox_error.h"

/* a message that was not delivered, and why */
typedef struct BatchFailure
{
	pg_uuid_t  *id;
	char	   *error;
	TimestampTz retry_at;		/* as the target asked; 0: the backoff's */
	bool		dead;			/* the target refused it for good */
} BatchFailure;

/*
 * A batch of a remote or HTTP route, from its claim to the record of its
 * outcomes; it lives in a memory context of its own (see
 * outbox_drain_remote.c).
 */
struct RemoteBatch
{
	MemoryContext cxt;			/* the batch and what it keeps */
	MemoryContext message_cxt;	/* the current message's envelope and call */

	/* the route, and whose credentials deliver it */
	char	   *topic;
	char	   *subscription;	/* a named one's; NULL: the default one */
	char	   *server;
	char	   *command;
	bool		http;			/* an HTTP route: url, ca_file, secrets */
	char	   *url;
	char	   *ca_file;
	HttpRouteSecrets *secrets;
	HttpRouteCounts counts;		/* its calls, for outbox.route_http_stats */
	TimestampTz route_created_at;	/* which setting of the route */
	Oid			role;			/* the route's creator; InvalidOid: gone */
	OutboxError no_creator;		/* ... and then why */
	bool		needs_password;
	text	   *owner;
	int64		lease_us;

	List	   *messages;		/* ClaimedMessages, in order */
	int			next;			/* the next one to send */
	ClaimedMessage *current;	/* the one being sent */
	BatchCall  *call;			/* ... and its call */

	List	   *done;			/* ids of those delivered */
	List	   *late;			/* ids of those released untried */
	List	   *failures;		/* BatchFailures */

	/* the route's breaker, as read with the route and changed since */
	int			consecutive_failures;
	TimestampTz paused_until;	/* DT_NOBEGIN: not paused */
	char	   *last_failure;
	bool		breaker_changed;
};

#endif							/* OUTBOX_DRAIN_REMOTE_INT_H */
