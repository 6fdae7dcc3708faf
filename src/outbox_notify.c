/*-------------------------------------------------------------------------
 *
 * outbox_notify.c
 *		NOTIFY routes: checking a channel, and delivering to it.
 *
 * A message routed to a channel is sent as pg_notify(channel, envelope).
 * NOTIFY is transactional: the notification leaves when the transaction
 * that completes the message commits, and not at all if it rolls back.  A
 * notification payload must stay under 8000 bytes, so a larger envelope is
 * sent without its payload and with "truncated": true; the listener reads
 * the whole envelope with outbox.envelope_by_id(id).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/async.h"

#include "outbox.h"
#include "outbox_delivery.h"
#include "outbox_envelope.h"

/*
 * Check a channel name: a lower-case SQL identifier (letters, digits, _ and
 * $, not starting with a digit or $) of at most NAMEDATALEN - 1 bytes, so
 * that `LISTEN channel` written without quotes receives it.
 */
void
CheckChannel(text *channel)
{
	const char *p = VARDATA_ANY(channel);
	int			len = VARSIZE_ANY_EXHDR(channel);
	int			i;

	if (len >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("channel is too long"),
				 errdetail("A channel has at most %d bytes.", NAMEDATALEN - 1)));

	for (i = 0; i < len; i++)
	{
		char		c = p[i];
		bool		ok;

		ok = (c >= 'a' && c <= 'z') || c == '_' ||
			(i > 0 && ((c >= '0' && c <= '9') || c == '$'));
		if (!ok)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("channel \"%.*s\" is not a valid identifier", len, p),
					 errdetail("A channel is made of lower-case letters, digits, underscores and dollar signs, and starts with a letter or an underscore."),
					 errhint("LISTEN folds an unquoted name to lower case, so a lower-case channel is received by LISTEN written either way.")));
	}
}

/*
 * Queue the envelope of m on channel; it is sent when the transaction
 * commits.  Returns false with the condition in *error, raising nothing,
 * when the message cannot be sent (a channel made invalid by hand in
 * outbox.routes, a created_at no envelope can carry).  An envelope whose
 * text would not fit in a notification goes without its payload; one whose
 * payload is over sixteen times the limit is known not to fit from its
 * size alone, and that payload is never detoasted (see EnvelopeText).
 */
bool
NotifyDeliver(const char *channel, ClaimedMessage *m, OutboxError *error)
{
	OutboxError too_long;
	char	   *envelope;
	size_t		len = strlen(channel);

	if (len == 0)
	{
		OutboxErrorSet(error, ERRCODE_INVALID_PARAMETER_VALUE,
					   "channel name cannot be empty");
		return false;
	}
	if (len >= NAMEDATALEN)
	{
		OutboxErrorSet(error, ERRCODE_INVALID_PARAMETER_VALUE,
					   "channel name too long");
		return false;
	}
	if (!EnvelopeCheckTimestamp(m->created_at, error))
		return false;

	envelope = EnvelopeText(&m->id, m->event_type, m->created_at, m->payload,
							OUTBOX_NOTIFY_MAX_BYTES, &too_long);
	if (envelope == NULL)
		envelope = EnvelopeText(&m->id, m->event_type, m->created_at,
								(Datum) 0, OUTBOX_NOTIFY_MAX_BYTES, error);
	if (envelope == NULL)
		return false;
	Async_Notify(channel, envelope);
	pfree(envelope);
	return true;
}
