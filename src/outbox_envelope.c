/*-------------------------------------------------------------------------
 *
 * outbox_envelope.c
 *		The wire envelope shared with the TypeScript and Java twins.
 *
 * An envelope is a JSON object with exactly the keys id, type, occurredAt
 * and payload.  occurredAt is created_at in UTC in the format of
 * JavaScript's Date.prototype.toISOString: YYYY-MM-DDTHH:MM:SS.sssZ with the
 * milliseconds truncated, and years outside 0000..9999 written with a sign
 * and six digits, as JavaScript does.  Instants JavaScript cannot represent
 * (infinity, or beyond ±8.64e15 ms from the Unix epoch) are rejected.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"

#include "outbox_envelope.h"

/* JavaScript's Date range: ±8.64e15 ms around the Unix epoch, in µs */
#define JS_DATE_LIMIT_US	INT64CONST(8640000000000000000)
#define UNIX_EPOCH_OFFSET_US \
	((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

static char *obx_iso_timestamp(TimestampTz ts);
static void obx_push_key(JsonbParseState **state, const char *key);

/*
 * Can ts be an occurredAt?  Not if it is infinite or outside the range of
 * a JavaScript Date; then returns false with the condition in *error.
 */
bool
EnvelopeCheckTimestamp(TimestampTz ts, OutboxError *error)
{
	if (TIMESTAMP_NOT_FINITE(ts))
	{
		OutboxErrorSet(error, ERRCODE_DATETIME_VALUE_OUT_OF_RANGE,
					   "timestamp out of range for an envelope");
		OutboxErrorDetail(error, "occurredAt cannot be infinite.");
		return false;
	}

	/* written without an addition that could overflow near the end of time */
	if (ts > JS_DATE_LIMIT_US - UNIX_EPOCH_OFFSET_US ||
		ts < -JS_DATE_LIMIT_US - UNIX_EPOCH_OFFSET_US)
	{
		OutboxErrorSet(error, ERRCODE_DATETIME_VALUE_OUT_OF_RANGE,
					   "timestamp out of range for an envelope");
		OutboxErrorDetail(error, "occurredAt must lie within the range of a JavaScript Date.");
		return false;
	}
	return true;
}

/*
 * Format ts the way JavaScript's toISOString does; palloc'd.  Raises the
 * error of EnvelopeCheckTimestamp for an instant JavaScript cannot hold.
 */
static char *
obx_iso_timestamp(TimestampTz ts)
{
	struct pg_tm tm;
	fsec_t		fsec;
	char		year[16];
	OutboxError error;

	if (!EnvelopeCheckTimestamp(ts, &error))
		OutboxErrorThrow(&error);

	if (timestamp2tm(ts, NULL, &tm, &fsec, NULL, NULL) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));

	/* tm_year is astronomical (0 = 1 BC), as JavaScript's years are */
	if (tm.tm_year >= 0 && tm.tm_year <= 9999)
		snprintf(year, sizeof(year), "%04d", tm.tm_year);
	else
		snprintf(year, sizeof(year), "%c%06d",
				 tm.tm_year < 0 ? '-' : '+', abs(tm.tm_year));

	return psprintf("%s-%02d-%02dT%02d:%02d:%02d.%03dZ",
					year, tm.tm_mon, tm.tm_mday,
					tm.tm_hour, tm.tm_min, tm.tm_sec, (int) (fsec / 1000));
}

/* Push an object key. */
static void
obx_push_key(JsonbParseState **state, const char *key)
{
	JsonbValue	k;

	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	pushJsonbValue(state, WJB_KEY, &k);
}

/*
 * Build an envelope; without payload and with "truncated": true when
 * payload is NULL (for channels that cannot carry the whole message).
 */
static Jsonb *
obx_build(pg_uuid_t *id, text *event_type, TimestampTz created_at,
		  Jsonb *payload)
{
	JsonbParseState *state = NULL;
	JsonbValue	v;
	JsonbValue *res;
	char	   *s;

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);

	obx_push_key(&state, "id");
	s = DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(id)));
	v.type = jbvString;
	v.val.string.val = s;
	v.val.string.len = strlen(s);
	pushJsonbValue(&state, WJB_VALUE, &v);

	obx_push_key(&state, "type");
	v.type = jbvString;
	v.val.string.val = VARDATA_ANY(event_type);
	v.val.string.len = VARSIZE_ANY_EXHDR(event_type);
	pushJsonbValue(&state, WJB_VALUE, &v);

	obx_push_key(&state, "occurredAt");
	s = obx_iso_timestamp(created_at);
	v.type = jbvString;
	v.val.string.val = s;
	v.val.string.len = strlen(s);
	pushJsonbValue(&state, WJB_VALUE, &v);

	if (payload)
	{
		obx_push_key(&state, "payload");
		v.type = jbvBinary;
		v.val.binary.data = &payload->root;
		v.val.binary.len = VARSIZE(payload) - VARHDRSZ;
		pushJsonbValue(&state, WJB_VALUE, &v);
	}
	else
	{
		obx_push_key(&state, "truncated");
		v.type = jbvBool;
		v.val.boolean = true;
		pushJsonbValue(&state, WJB_VALUE, &v);
	}

	res = pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(res);
}

/* Build the envelope of one message. */
Jsonb *
BuildEnvelope(pg_uuid_t *id, text *event_type, TimestampTz created_at,
			  Jsonb *payload)
{
	Assert(payload != NULL);
	return obx_build(id, event_type, created_at, payload);
}

/*
 * The envelope without its payload, marked "truncated": true; a listener
 * reads the whole one with outbox.envelope_by_id.
 */
Jsonb *
BuildTruncatedEnvelope(pg_uuid_t *id, text *event_type, TimestampTz created_at)
{
	return obx_build(id, event_type, created_at, NULL);
}
