/*-------------------------------------------------------------------------
 *
 * outbox_validate.c
 *		Checks of the arguments the SQL functions receive.
 *
 * Every check either returns a usable value or raises an error with the
 * SQLSTATE the contract names: 22004 for a NULL where none is allowed,
 * 22023 for an empty, overlong or malformed value or a number out of range.
 * The checks run before any statement, so a rejected call changes nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mb/pg_wchar.h"
#include "utils/builtins.h"

#include "outbox.h"

static bool obx_is_control(pg_wchar c);

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
 * Check a topic, type, owner, consumer or channel name: 1 to 200 characters,
 * not only white space, no control characters.  Returns the detoasted text.
 */
text *
CheckName(Datum value, bool isnull, const char *what)
{
	text	   *t;
	const char *p;
	int			len;
	int			nchars = 0;
	bool		blank = true;

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
		if (GetDatabaseEncoding() == PG_UTF8)
			c = utf8_to_unicode((const unsigned char *) p);
		else
			c = (clen == 1) ? (unsigned char) *p : 0x100;

		if (obx_is_control(c))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must not contain control characters", what),
					 errdetail("Character %d is U+%04X.", nchars + 1, (unsigned int) c)));
		if (!(clen == 1 && (*p == ' ')))
			blank = false;

		nchars++;
		p += clen;
		len -= clen;
	}

	if (blank)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what),
				 errdetail("The value consists of spaces only.")));

	if (nchars > OUTBOX_NAME_MAX_CHARS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too long", what),
				 errdetail("The value has %d characters; at most %d are allowed.",
						   nchars, OUTBOX_NAME_MAX_CHARS)));

	return t;
}

/* The batch size of a claim: the argument, or outbox.batch_size when NULL. */
int
CheckBatchSize(Datum value, bool isnull)
{
	int32		n;

	if (isnull)
		return outbox_batch_size;
	n = DatumGetInt32(value);
	if (n < OUTBOX_BATCH_SIZE_MIN || n > OUTBOX_BATCH_SIZE_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch_size %d is out of range", n),
				 errdetail("batch_size must be between %d and %d, the range of %s.",
						   OUTBOX_BATCH_SIZE_MIN, OUTBOX_BATCH_SIZE_MAX,
						   "outbox.batch_size")));
	return n;
}

/* The lease length: the argument, or outbox.lease_seconds when NULL. */
int
CheckLeaseSeconds(Datum value, bool isnull)
{
	int32		n;

	if (isnull)
		return outbox_lease_seconds;
	n = DatumGetInt32(value);
	if (n < OUTBOX_LEASE_SECONDS_MIN || n > OUTBOX_LEASE_SECONDS_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease_seconds %d is out of range", n),
				 errdetail("lease_seconds must be between %d and %d, the range of %s.",
						   OUTBOX_LEASE_SECONDS_MIN, OUTBOX_LEASE_SECONDS_MAX,
						   "outbox.lease_seconds")));
	return n;
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
