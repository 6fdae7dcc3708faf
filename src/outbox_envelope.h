/*-------------------------------------------------------------------------
 *
 * outbox_envelope.h
 *		The wire envelope of a message (see outbox_envelope.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ENVELOPE_H
#define OUTBOX_ENVELOPE_H

#include "datatype/timestamp.h"
#include "utils/jsonb.h"
#include "utils/uuid.h"

#include "outbox_error.h"

extern Jsonb *BuildEnvelope(pg_uuid_t *id, text *event_type, TimestampTz created_at,
							Jsonb *payload);
extern char *EnvelopeText(pg_uuid_t *id, text *event_type, TimestampTz created_at,
						  Datum payload, int max_len, OutboxError *error);
extern bool EnvelopeCheckTimestamp(TimestampTz ts, OutboxError *error);

#endif							/* OUTBOX_ENVELOPE_H */
