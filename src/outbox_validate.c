/*-------------------------------------------------------------------------
 *
 * outbox_validate.c
 *		Checks of the arguments the SQL functions receive.
 *
 * Every check either returns a usable value or raises an error with the
 * SQLSTATE the contract names: 22004 for a NULL where none is allowed,
 * 22023 for an empty, overlong or malformed value or a number out of range.
 * The checks run before any statement, so a rejected call changes nothing.
 * A check that takes a NULL for "the default" returns the default.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_validate.h"

static bool obx_is_control(pg_wchar c);
static bool obx_shows_nothing(pg_wchar c);
static int	obx_check_range(Datum value, bool isnull, const char *what,
							int setting, int min, int max, const char *guc);
static TimestampTz obx_minus_interval(TimestampTz now, Interval *span);
static void obx_check_not_empty(const char *value, const char *skip,
								const char *what);

/* Raise 22004 if a required argument is NULL. */
void
CheckNotNull(bool isnull, const char *what)
{
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
}

/* Is c a control character (Unicode general category Cc)? */
static bool
obx_is_control(pg_wchar c)
{
	return c < 0x20 || (c >= 0x7f && c <= 0x9f);
}

/*
 * Does c show nothing: Unicode white space (the property White_Space) or a
 * format character that renders as nothing (zero width space, joiners,
 * word joiner, byte order mark, Mongolian vowel separator)?
 */
static bool
obx_shows_nothing(pg_wchar c)
{
	return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 ||
		c == 0xa0 || c == 0x1680 || c == 0x180e ||
		(c >= 0x2000 && c <= 0x200d) || c == 0x2028 || c == 0x2029 ||
		c == 0x202f || c == 0x205f || c == 0x2060 || c == 0x3000 ||
		c == 0xfeff;
}

/*
 * Check a topic, type, owner, consumer, channel or ordering key: 1 to 200
 * characters, not only characters that show nothing (white space, zero
 * width and other invisible format characters), no control characters.  A
 * name made of them only would look empty wherever it is shown, and two
 * such names could not be told apart.  In a database encoding other than
 * UTF-8 only ASCII characters are judged so: a non-ASCII byte there means
 * what its encoding says, and counts as visible.  Returns the detoasted
 * text.
 */
text *
CheckName(Datum value, bool isnull, const char *what)
{
	text	   *t;
	const char *p;
	int			len;
	int			nchars = 0;
	bool		spaces = true;	/* U+0020 only */
	bool		blank = true;	/* characters that show nothing only */
	bool		utf8 = GetDatabaseEncoding() == PG_UTF8;

	CheckNotNull(isnull, what);

	t = DatumGetTextPP(value);
	p = VARDATA_ANY(t);
	len = VARSIZE_ANY_EXHDR(t);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));

	while (len > 0)
	{
		int			clen = pg_mblen(p);
		pg_wchar	c;

		if (clen > len)
			clen = len;
		if (utf8)
			c = utf8_to_unicode((const unsigned char *) p);
		else
			c = (clen == 1) ? (unsigned char) *p : 0x100;

		if (obx_is_control(c))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must not contain control characters", what),
					 errdetail("Character %d is U+%04X.", nchars + 1, (unsigned int) c)));
		if (!(clen == 1 && (*p == ' ')))
			spaces = false;
		if (!((utf8 || c < 0x80) && obx_shows_nothing(c)))
			blank = false;

		nchars++;
		p += clen;
		len -= clen;
	}

	if (spaces)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what),
				 errdetail("The value consists of spaces only.")));
	if (blank)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what),
				 errdetail("The value consists of white space and invisible characters only.")));

	if (nchars > OUTBOX_NAME_MAX_CHARS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too long", what),
				 errdetail("The value has %d characters; at most %d are allowed.",
						   nchars, OUTBOX_NAME_MAX_CHARS)));

	return t;
}

/* A uuid argument that must not be NULL. */
pg_uuid_t *
CheckUuid(Datum value, bool isnull, const char *what)
{
	CheckNotNull(isnull, what);
	return DatumGetUUIDP(value);
}

/*
 * A one-dimensional array argument of elemtype without NULL elements; sets
 * *nelems to its number of elements.
 */
ArrayType *
CheckArray(Datum value, bool isnull, const char *what, Oid elemtype,
		   int *nelems)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			i;

	CheckNotNull(isnull, what);
	arr = DatumGetArrayTypeP(value);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", what)));

	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(arr, elemtype, typlen, typbyval, typalign,
					  &elems, &nulls, nelems);
	for (i = 0; i < *nelems; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not contain null elements", what),
					 errdetail("Element %d is null.", i + 1)));
	return arr;
}

/* When a message becomes available: a finite timestamp, or now when NULL. */
TimestampTz
CheckAvailableAt(Datum value, bool isnull, TimestampTz now)
{
	TimestampTz ts;

	if (isnull)
		return now;
	ts = DatumGetTimestampTz(value);
	if (TIMESTAMP_NOT_FINITE(ts))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("available_at must be a finite timestamp"),
				 errhint("Pass NULL to make the message available at once.")));
	return ts;
}

/*
 * An integer argument within [min, max] that stands for the setting guc:
 * the argument, or the setting's value when NULL.
 */
static int
obx_check_range(Datum value, bool isnull, const char *what, int setting,
				int min, int max, const char *guc)
{
	int32		n;

	if (isnull)
		return setting;
	n = DatumGetInt32(value);
	if (n < min || n > max)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s %d is out of range", what, n),
				 errdetail("%s must be between %d and %d, the range of %s.",
						   what, min, max, guc)));
	return n;
}

/* The batch size of a claim: the argument, or outbox.batch_size when NULL. */
int
CheckBatchSize(Datum value, bool isnull)
{
	return obx_check_range(value, isnull, "batch_size", outbox_batch_size,
						   OUTBOX_BATCH_SIZE_MIN, OUTBOX_BATCH_SIZE_MAX,
						   "outbox.batch_size");
}

/* The lease length: the argument, or outbox.lease_seconds when NULL. */
int
CheckLeaseSeconds(Datum value, bool isnull)
{
	return obx_check_range(value, isnull, "lease_seconds", outbox_lease_seconds,
						   OUTBOX_LEASE_SECONDS_MIN, OUTBOX_LEASE_SECONDS_MAX,
						   "outbox.lease_seconds");
}

/* The error text of a failed delivery: not empty, clipped as last_error is. */
text *
CheckErrorText(Datum value, bool isnull)
{
	text	   *error;

	CheckNotNull(isnull, "error");
	error = DatumGetTextPP(value);
	if (VARSIZE_ANY_EXHDR(error) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("error must not be empty"),
				 errhint("Pass the text of the failure, so that an operator can tell why the delivery failed.")));
	return ClipErrorText(VARDATA_ANY(error), VARSIZE_ANY_EXHDR(error));
}

/*
 * now - span, as PostgreSQL computes it (months by the calendar), or
 * DT_NOBEGIN when that is before the earliest timestamp.  The subtraction
 * runs in a subtransaction because PostgreSQL reports its overflow only as
 * an error; purge is rare enough for that.
 */
static TimestampTz
obx_minus_interval(TimestampTz now, Interval *span)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile TimestampTz horizon = 0;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		horizon = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
														  TimestampTzGetDatum(now),
														  PointerGetDatum(span)));
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (edata->sqlerrcode != ERRCODE_DATETIME_VALUE_OUT_OF_RANGE)
			ReThrowError(edata);
		FreeErrorData(edata);
		horizon = DT_NOBEGIN;	/* a positive span beyond the range */
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return horizon;
}

/*
 * The horizon of purge: now - older_than, or now - outbox.retention_days
 * when NULL.  An interval is negative when it is with months counted as 30
 * days, a rule that does not depend on today's date; such an interval is
 * refused.  A horizon before the earliest timestamp keeps everything
 * (DT_NOBEGIN), and one that the calendar puts after now (say '1 mon -30
 * days' at the end of a long month) is now.
 */
TimestampTz
CheckPurgeHorizon(Datum older_than, bool isnull, TimestampTz now)
{
	Interval   *older;
	double		span;

	if (isnull)
		return now - (int64) outbox_retention_days * USECS_PER_DAY;

	older = DatumGetIntervalP(older_than);
	span = (double) older->time +
		((double) older->day + (double) older->month * DAYS_PER_MONTH) *
		(double) USECS_PER_DAY;
	if (span < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("older_than must not be negative"),
				 errhint("Pass an interval such as '7 days', or NULL for %s.",
						 "outbox.retention_days")));
	return Min(obx_minus_interval(now, older), now);
}

/* How many messages purge may delete: at least 1, or -1 (all) when NULL. */
int64
CheckMaxRows(Datum value, bool isnull)
{
	int64		max_rows;

	if (isnull)
		return -1;
	max_rows = DatumGetInt64(value);
	if (max_rows < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_rows " INT64_FORMAT " is out of range", max_rows),
				 errdetail("max_rows must be at least 1, or NULL to purge every finished message.")));
	return max_rows;
}

/*
 * Raise 22023 if value is empty or (when skip names characters) made of
 * those characters only.
 */
static void
obx_check_not_empty(const char *value, const char *skip, const char *what)
{
	if (value[strspn(value, skip)] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
}

/* The name of a foreign server: not NULL, not empty. */
char *
CheckServerName(Datum value, bool isnull)
{
	char	   *server;

	CheckNotNull(isnull, "server");
	server = NameStr(*DatumGetName(value));
	obx_check_not_empty(server, "", "server");
	return server;
}

/*
 * The remote command of a route, as a C string: not NULL, not only white
 * space.  Whether it parses is the remote target's check.
 */
char *
CheckCommand(Datum value, bool isnull)
{
	char	   *command;

	CheckNotNull(isnull, "command");
	command = text_to_cstring(DatumGetTextPP(value));
	obx_check_not_empty(command, " \t\r\n\f\v", "command");
	return command;
}

/*
 * An error text as stored in last_error: at most OUTBOX_ERROR_MAX_BYTES
 * bytes, cut on a character boundary.
 */
text *
ClipErrorText(const char *str, int len)
{
	if (len > OUTBOX_ERROR_MAX_BYTES)
		len = pg_mbcliplen(str, len, OUTBOX_ERROR_MAX_BYTES);
	return cstring_to_text_with_len(str, len);
}
