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
 * Two forms: the jsonb of the SQL functions (BuildEnvelope), and the text
 * that delivery sends (EnvelopeText), written straight from the stored
 * message exactly as jsonb's output function writes the jsonb form.
 * Writing the text directly lets delivery judge a message by its sizes
 * before anything is built: an envelope too large for jsonb, or whose text
 * would outgrow what the target accepts, is that message's failure, never
 * an error raised that would take its batch down; and a payload that
 * cannot fit is not even detoasted.
 *
 * Glossary:
 *	payload size	the size of a payload detoasted, varlena header included
 *					(toast_raw_datum_size), known without detoasting it
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

#include "outbox_envelope.h"

/* JavaScript's Date range: ±8.64e15 ms around the Unix epoch, in µs */
#define JS_DATE_LIMIT_US	INT64CONST(8640000000000000000)
#define UNIX_EPOCH_OFFSET_US \
	((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

/*
 * The most an envelope adds to its payload as jsonb, the type aside: the
 * object's header and eight JEntries, the keys "id", "type", "payload" and
 * "occurredAt", the id, the longest occurredAt ("+275760-09-13T00:00:00.000Z")
 * and up to three bytes that align the payload.
 */
#define ENVELOPE_JSONB_OVERHEAD		(4 + 8 * 4 + 23 + 36 + 27 + 3)

/*
 * jsonb never takes more than about four times the length of its text (an
 * array of zeros comes closest: a JEntry, alignment and a numeric for each
 * "0, "), so a payload over sixteen times max_len bytes cannot be written
 * in max_len bytes, and is not detoasted to find that out.
 */
#define ENVELOPE_JSONB_PER_CHAR		16

static char *obx_iso_timestamp(TimestampTz ts);
static void obx_push_key(JsonbParseState **state, const char *key);
static bool obx_fits_jsonb(Size payload_size, text *event_type,
						   OutboxError *error);
static char obx_short_escape(unsigned char c);
static int	obx_escaped_len(unsigned char c);
static void obx_put_escaped(StringInfo out, unsigned char c);
static bool obx_put_string(StringInfo out, const char *s, int len, int max_len);
static bool obx_put_scalar(StringInfo out, JsonbValue *v, int max_len);
static bool obx_put_jsonb(StringInfo out, JsonbContainer *root, int max_len);

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

/* Build the envelope of one message as jsonb. */
Jsonb *
BuildEnvelope(pg_uuid_t *id, text *event_type, TimestampTz created_at,
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

	obx_push_key(&state, "payload");
	v.type = jbvBinary;
	v.val.binary.data = &payload->root;
	v.val.binary.len = VARSIZE(payload) - VARHDRSZ;
	pushJsonbValue(&state, WJB_VALUE, &v);

	res = pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(res);
}

/*
 * Could the envelope of a payload of payload_size bytes be a jsonb value?
 * The contents of a jsonb object may take JENTRY_OFFLENMASK bytes (256 MB);
 * in the envelope a payload takes at most its own size less its varlena
 * header (a scalar 8 bytes less), and alignment.  So the sizes alone
 * answer, erring by at most 14 bytes on the side of no.  A remote server
 * builds this very jsonb from the text it is sent, so the limit holds for
 * every route.  Returns false with the condition in *error.
 */
static bool
obx_fits_jsonb(Size payload_size, text *event_type, OutboxError *error)
{
	Size		limit = JENTRY_OFFLENMASK - ENVELOPE_JSONB_OVERHEAD -
		VARSIZE_ANY_EXHDR(event_type);

	if (payload_size - VARHDRSZ <= limit)
		return true;
	OutboxErrorSet(error, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
				   "envelope would exceed the maximum size of a jsonb value");
	OutboxErrorDetail(error, "The payload takes %zu bytes; the contents of a jsonb object may take at most %u bytes.",
					  payload_size - VARHDRSZ, (unsigned int) JENTRY_OFFLENMASK);
	return false;
}

/*
 * The letter of the two-byte escape of byte c in a JSON string as
 * escape_json writes it ("\n" for a newline), or 0 when c has none.
 */
static char
obx_short_escape(unsigned char c)
{
	switch (c)
	{
		case '\b':
			return 'b';
		case '\f':
			return 'f';
		case '\n':
			return 'n';
		case '\r':
			return 'r';
		case '\t':
			return 't';
		case '"':
		case '\\':
			return (char) c;
		default:
			return 0;
	}
}

/* The length of byte c in a JSON string, as escape_json writes it. */
static int
obx_escaped_len(unsigned char c)
{
	if (obx_short_escape(c) != 0)
		return 2;
	return c < ' ' ? 6 : 1;
}

/* Append the escape of byte c, one that obx_escaped_len counts over 1. */
static void
obx_put_escaped(StringInfo out, unsigned char c)
{
	char		letter = obx_short_escape(c);

	if (letter != 0)
	{
		appendStringInfoCharMacro(out, '\\');
		appendStringInfoCharMacro(out, letter);
	}
	else
		appendStringInfo(out, "\\u%04x", (int) c);
}

/*
 * Append len bytes at s as a JSON string, escaped as escape_json escapes
 * (which wants a NUL-terminated copy: a second copy of a large string).
 * Returns false, appending nothing, when that would make out longer than
 * max_len; the escaped length is counted only when six bytes for each
 * byte might not fit.
 */
static bool
obx_put_string(StringInfo out, const char *s, int len, int max_len)
{
	Size		room;
	Size		need = (Size) len + 2;
	int			start = 0;
	int			i;

	if (out->len > max_len)
		return false;
	room = (Size) (max_len - out->len);
	if ((Size) len * 6 + 2 > room)
	{
		for (i = 0; i < len; i++)
			need += obx_escaped_len((unsigned char) s[i]) - 1;
		if (need > room)
			return false;
	}

	enlargeStringInfo(out, need);
	appendStringInfoCharMacro(out, '"');
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c >= ' ' && c != '"' && c != '\\')
			continue;
		appendBinaryStringInfo(out, s + start, i - start);
		obx_put_escaped(out, c);
		start = i + 1;
	}
	appendBinaryStringInfo(out, s + start, len - start);
	appendStringInfoCharMacro(out, '"');
	return true;
}

/*
 * Append a scalar or a key as jsonb's output writes it; false, appending
 * nothing, when that would make out longer than max_len.  A number is
 * written out first: a numeric of a few bytes may print as 131072 digits.
 */
static bool
obx_put_scalar(StringInfo out, JsonbValue *v, int max_len)
{
	char	   *num;
	bool		fits;

	switch (v->type)
	{
		case jbvString:
			return obx_put_string(out, v->val.string.val, v->val.string.len,
								  max_len);
		case jbvNumeric:
			num = DatumGetCString(DirectFunctionCall1(numeric_out,
													  NumericGetDatum(v->val.numeric)));
			fits = (Size) out->len + strlen(num) <= (Size) max_len;
			if (fits)
				appendStringInfoString(out, num);
			pfree(num);
			return fits;
		case jbvBool:
			appendStringInfoString(out, v->val.boolean ? "true" : "false");
			break;
		case jbvNull:
			appendBinaryStringInfo(out, "null", 4);
			break;
		default:
			elog(ERROR, "unexpected jsonb value type %d", (int) v->type);
	}
	return out->len <= max_len;
}

/*
 * Append a jsonb value as its output function writes it (JsonbToCString:
 * ", " between elements and between members, ": " after a key, a scalar at
 * the top without brackets).  Returns false as soon as out would grow
 * longer than max_len, so that out never takes much more than max_len
 * whatever the value.
 */
static bool
obx_put_jsonb(StringInfo out, JsonbContainer *root, int max_len)
{
	JsonbIterator *it = JsonbIteratorInit(root);
	JsonbIteratorToken token;
	JsonbValue	v;
	bool		first = true;
	bool		raw_scalar = false;

	while ((token = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		CHECK_FOR_INTERRUPTS();

		/* a key or an element after another is set off by ", " */
		if (!first && (token == WJB_BEGIN_ARRAY || token == WJB_BEGIN_OBJECT ||
					   token == WJB_KEY || token == WJB_ELEM))
			appendBinaryStringInfo(out, ", ", 2);

		switch (token)
		{
			case WJB_BEGIN_ARRAY:
			case WJB_BEGIN_OBJECT:
				/* only a top-level scalar comes as an array, alone */
				raw_scalar = token == WJB_BEGIN_ARRAY && v.val.array.rawScalar;
				if (!raw_scalar)
					appendStringInfoCharMacro(out, token == WJB_BEGIN_ARRAY ? '[' : '{');
				first = true;
				break;
			case WJB_KEY:
				if (!obx_put_scalar(out, &v, max_len))
					return false;
				appendBinaryStringInfo(out, ": ", 2);
				first = true;	/* its value follows without ", " */
				break;
			case WJB_VALUE:
			case WJB_ELEM:
				if (!obx_put_scalar(out, &v, max_len))
					return false;
				first = false;
				break;
			case WJB_END_ARRAY:
			case WJB_END_OBJECT:
				if (!raw_scalar)
					appendStringInfoCharMacro(out, token == WJB_END_ARRAY ? ']' : '}');
				first = false;
				break;
			default:
				elog(ERROR, "unexpected jsonb iterator token %d", (int) token);
		}
		if (out->len > max_len)
			return false;
	}
	return true;
}

/*
 * The text of the envelope of a message, palloc'd, as jsonb's output
 * function writes the jsonb envelope (BuildEnvelope); with payload
 * (Datum) 0, the envelope without its payload and with "truncated": true,
 * for a channel that cannot carry the whole message.  The payload is
 * given as stored: perhaps compressed, perhaps a TOAST pointer.
 *
 * Returns NULL with the condition in *error, raising nothing, when the
 * text cannot be made in at most max_len bytes, the envelope could not be
 * a jsonb value, or created_at cannot be an occurredAt.  The sizes decide
 * first: a payload too large for either limit is never detoasted.  One
 * that is detoasted is freed before this returns, and the text never takes
 * much more than max_len bytes while it is written: at most this payload
 * and this text are held at once.
 */
char *
EnvelopeText(pg_uuid_t *id, text *event_type, TimestampTz created_at,
			 Datum payload, int max_len, OutboxError *error)
{
	StringInfoData out;
	Size		payload_size = 0;
	bool		fits;

	if (!EnvelopeCheckTimestamp(created_at, error))
		return NULL;

	if (payload != (Datum) 0)
	{
		payload_size = toast_raw_datum_size(payload);

		if (!obx_fits_jsonb(payload_size, event_type, error))
			return NULL;
		if (payload_size > (Size) max_len * ENVELOPE_JSONB_PER_CHAR)
		{
			OutboxErrorSet(error, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
						   "envelope text would exceed %d bytes", max_len);
			return NULL;
		}
	}

	/*
	 * Room for about the text of a payload without escapes, so that a large
	 * text is not copied as it grows; the keys in jsonb's order: the shorter
	 * first.
	 */
	initStringInfo(&out);
	enlargeStringInfo(&out, (int) Min(payload_size, (Size) max_len) + 256);
	appendStringInfo(&out, "{\"id\": \"%s\", \"type\": ",
					 DatumGetCString(DirectFunctionCall1(uuid_out,
														 UUIDPGetDatum(id))));
	fits = obx_put_string(&out, VARDATA_ANY(event_type),
						  VARSIZE_ANY_EXHDR(event_type), max_len);
	if (fits && payload != (Datum) 0)
	{
		Jsonb	   *jb = DatumGetJsonbP(payload);

		appendStringInfoString(&out, ", \"payload\": ");
		fits = obx_put_jsonb(&out, &jb->root, max_len);
		if ((Pointer) jb != DatumGetPointer(payload))
			pfree(jb);
	}
	else if (fits)
		appendStringInfoString(&out, ", \"truncated\": true");
	if (fits)
	{
		appendStringInfo(&out, ", \"occurredAt\": \"%s\"}",
						 obx_iso_timestamp(created_at));
		fits = out.len <= max_len;
	}

	if (!fits)
	{
		pfree(out.data);
		OutboxErrorSet(error, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
					   "envelope text would exceed %d bytes", max_len);
		return NULL;
	}
	return out.data;
}
