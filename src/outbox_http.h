/*-------------------------------------------------------------------------
 *
 * outbox_http.h
 *		HTTP routes (webhooks): a call that POSTs one envelope and never
 *		blocks (outbox_http_call.c, on the connections of
 *		outbox_http_conn.c), the addresses a call may connect to
 *		(outbox_http_addr.c), and the signatures of the Standard Webhooks
 *		specification (outbox_http_sign.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_HTTP_H
#define OUTBOX_HTTP_H

#include <sys/socket.h>

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

#include "outbox_error.h"

/* how an HTTP call ended */
typedef enum HttpOutcome
{
	HTTP_PENDING,				/* it has not */
	HTTP_DELIVERED,				/* 2xx */
	HTTP_RETRY,					/* 3xx, 408, 429, 5xx: a failure that backs
								 * off (retry_after, when the answer said) */
	HTTP_REJECTED,				/* any other 4xx: the message is dead */
	HTTP_GONE,					/* 410: the route stops */
	HTTP_UNREACHABLE			/* no answer: name, connection, TLS, refused
								 * address, deadline */
} HttpOutcome;

/* what a call reports of itself, for the route's counters */
typedef struct HttpCallReport
{
	int			status;			/* the HTTP status; 0: no answer */
	TimestampTz retry_after;	/* Retry-After, as a time; 0: none */
	double		latency_ms;		/* from the start to the end of the call */
} HttpCallReport;

/* the largest part of a response body kept for last_error */
#define HTTP_ERROR_BODY_BYTES	1024

/* a call (outbox_http_call.c) */
typedef struct HttpCall HttpCall;

/*
 * Start a POST of body to url.  headers are complete header lines
 * ("Name: value"), the outbox's and the route's; ca_file, when not NULL,
 * verifies the server's certificate instead of the system's store.  The
 * call ends by deadline at the latest.  Raises only for what makes any
 * call impossible (out of memory, libcurl unusable); the failures of this
 * call are its outcome.
 */
extern HttpCall *HttpCallStart(const char *url, const char *ca_file,
							   List *headers, const char *body, size_t len,
							   TimestampTz deadline);
extern int	HttpCallSocket(HttpCall *call, pgsocket *sock);
extern TimestampTz HttpCallDeadline(HttpCall *call);
extern void HttpCallStep(HttpCall *call, int ready);
extern void HttpCallWait(HttpCall *call);
extern HttpOutcome HttpCallOutcome(HttpCall *call, const OutboxError **error,
								   HttpCallReport *report);
extern void HttpCallAbandon(HttpCall *call);

/* the checks of a route's URL at its creation (outbox_http_call.c) */
extern void HttpCheckUrl(const char *url);

/* the addresses a call may connect to (outbox_http_addr.c) */
extern bool HttpAddressAllowed(const struct sockaddr *addr, socklen_t len,
							   char *why, size_t whylen);
extern bool HttpCheckPrivateNetworks(char **newval, void **extra);
extern void HttpAssignPrivateNetworks(const char *newval, void *extra);
extern void HttpFilterChanged(void);
extern uint64 HttpFilterGeneration(void);

/* Standard Webhooks signatures (outbox_http_sign.c) */
#define WEBHOOK_SECRET_PREFIX	"whsec_"
#define WEBHOOK_KEY_MIN			24
#define WEBHOOK_KEY_MAX			64
extern int	WebhookSecretKey(const char *secret, uint8 *key);
extern char *WebhookSignature(const uint8 *key, int keylen, const char *msg_id,
							  int64 timestamp, const char *body, size_t len);
extern char *WebhookSecretFingerprint(const char *secret);

#endif							/* OUTBOX_HTTP_H */
