/*-------------------------------------------------------------------------
 *
 * outbox_drain_call.c
 *		The call of one message of a batch, whichever its route's target:
 *		a remote command (outbox_remote_command.c) or an HTTP request
 *		(outbox_http_call.c); and the request of an HTTP route, with the
 *		headers of the Standard Webhooks specification.
 *
 * Both kinds never block: the worker waits for any number of them at once
 * on their sockets (outbox_drain_wait.c), drain_once for one at a time
 * (BatchCallWait).
 *
 * An HTTP request carries the envelope as its body and, besides the
 * route's own headers: webhook-id, the message's id, the same on every
 * attempt, for receivers to deduplicate; webhook-timestamp, the attempt's
 * time in unix seconds; and webhook-signature, "v1,<signature>" under the
 * route's secret, followed by a second one under the secret of before
 * while a rotation lasts (outbox_http_sign.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "outbox.h"
#include "outbox_drain_int.h"

/* The signatures of one attempt, space-separated; NULL: unsigned. */
static char *
obx_signatures(const HttpRouteSecrets *secrets, const char *msg_id,
			   int64 ts, const char *body, size_t len, TimestampTz now)
{
	uint8		key[WEBHOOK_KEY_MAX];
	int			keylen;
	char	   *sig;

	if (secrets->secret == NULL)
		return NULL;
	keylen = WebhookSecretKey(secrets->secret, key);
	sig = WebhookSignature(key, keylen, msg_id, ts, body, len);
	if (secrets->previous_secret != NULL && secrets->previous_until > now)
	{
		keylen = WebhookSecretKey(secrets->previous_secret, key);
		sig = psprintf("%s %s", sig,
					   WebhookSignature(key, keylen, msg_id, ts, body, len));
	}
	explicit_bzero(key, sizeof(key));
	return sig;
}

/*
 * Start the HTTP request of the message id with body envelope, to end by
 * deadline.  In the current memory context, which lives as long as the
 * call.
 */
BatchCall *
BatchCallHttp(const char *url, const char *ca_file,
			  const HttpRouteSecrets *secrets, const pg_uuid_t *id,
			  const char *envelope, TimestampTz deadline)
{
	BatchCall  *call = palloc0(sizeof(BatchCall));
	TimestampTz now = GetCurrentTimestamp();
	int64		ts = (int64) (now / USECS_PER_SEC) +
		(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY;
	char	   *msg_id = DatumGetCString(DirectFunctionCall1(uuid_out,
															 UUIDPGetDatum(id)));
	size_t		len = strlen(envelope);
	char	   *sig = obx_signatures(secrets, msg_id, ts, envelope, len, now);
	List	   *headers = NIL;

	headers = lappend(headers, "Content-Type: application/json");
	headers = lappend(headers, psprintf("webhook-id: %s", msg_id));
	headers = lappend(headers, psprintf("webhook-timestamp: " INT64_FORMAT, ts));
	if (sig != NULL)
		headers = lappend(headers, psprintf("webhook-signature: %s", sig));
	headers = list_concat(headers, secrets->headers);

	call->http = HttpCallStart(url, ca_file, headers, envelope, len, deadline);
	return call;
}

/* The socket events the call waits for and its socket; 0 when it ended. */
int
BatchCallSocket(BatchCall *call, pgsocket *sock)
{
	if (call->http != NULL)
		return HttpCallSocket(call->http, sock);
	return RemoteCallSocket(call->remote, sock);
}

/* When the call's wait runs out. */
TimestampTz
BatchCallDeadline(BatchCall *call)
{
	if (call->http != NULL)
		return HttpCallDeadline(call->http);
	return RemoteCallDeadline(call->remote);
}

/* Take the call as far as it goes without waiting. */
void
BatchCallStep(BatchCall *call, int ready)
{
	if (call->http != NULL)
		HttpCallStep(call->http, ready);
	else
		RemoteCallStep(call->remote, ready);
}

/* Wait for the call to end, serving interrupts (drain_once). */
void
BatchCallWait(BatchCall *call)
{
	if (call->http != NULL)
		HttpCallWait(call->http);
	else
		RemoteCallWait(call->remote);
}

/* Whether the call is still running. */
bool
BatchCallPending(BatchCall *call)
{
	if (call->http != NULL)
	{
		const OutboxError *error;
		HttpCallReport report;

		return HttpCallOutcome(call->http, &error, &report) == HTTP_PENDING;
	}
	else
	{
		const OutboxError *error;

		return RemoteCallOutcome(call->remote, &error) == REMOTE_PENDING;
	}
}

/* Give up the call, closing its connection; safe on a call that ended. */
void
BatchCallAbandon(BatchCall *call)
{
	if (call->http != NULL)
		HttpCallAbandon(call->http);
	else
		RemoteCallAbandon(call->remote);
}
